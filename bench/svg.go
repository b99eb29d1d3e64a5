package bench

import (
	"encoding/xml"
	"fmt"
	"io"
	"strings"
)

var kindColor = map[string]string{
	KindReference: "#8c96a5",
	KindWeft:      "#1f77b4",
	KindDaemon:    "#e07b39",
}

func esc(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}

// WriteSVG draws throughput and packet rate per subject as horizontal bars, each
// labelled with its value and its ratio to kernel-vxlan and the underlay.
func (r *Report) WriteSVG(w io.Writer) error {
	const (
		width  = 900
		labelW = 150
		barW   = 430
		rowH   = 24
		top    = 40
	)
	panels := []MetricInfo{metricInfo(TCPGbps), metricInfo(UDPKpps)}
	panelH := 30 + rowH*len(r.Rows) + 20
	height := top + panelH*len(panels) + 30
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="13">`+"\n",
		width, height, width, height)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)
	fmt.Fprintf(&b, `<text x="10" y="24" font-size="16" font-weight="bold">weft benchmark%s: medians of %d repetition(s), %gs each</text>`+"\n", esc(r.familyShort()), r.Reps, r.DurationS)
	y := top
	for _, m := range panels {
		maxV := 0.0
		for _, row := range r.Rows {
			maxV = max(maxV, row.Median[m.Key])
		}
		fmt.Fprintf(&b, `<text x="10" y="%d" font-weight="bold">%s (%s)</text>`+"\n", y+18, esc(m.Title), esc(m.Unit))
		y += 30
		for _, row := range r.Rows {
			v, ok := row.Median[m.Key]
			w := 0.0
			if ok && maxV > 0 {
				w = v / maxV * barW
			}
			color := kindColor[row.Kind]
			if color == "" {
				color = kindColor[KindDaemon]
			}
			fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="end">%s</text>`+"\n", labelW-8, y+16, esc(row.Subject))
			fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.1f" height="%d" fill="%s"/>`+"\n", labelW, y+4, w, rowH-8, color)
			label := "not measured"
			if ok {
				label = fmt.Sprintf("%s %s  (%s kvxlan, %s underlay)", fmtValue(m.Key, row.Median), m.Unit,
					fmtRatio(m.Key, row.VsKernelVXLAN), fmtRatio(m.Key, row.VsUnderlay))
			}
			fmt.Fprintf(&b, `<text x="%.1f" y="%d">%s</text>`+"\n", float64(labelW)+w+6, y+16, esc(label))
			y += rowH
		}
		y += 20
	}
	lx := 10
	for _, k := range []string{KindReference, KindWeft, KindDaemon} {
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="12" height="12" fill="%s"/><text x="%d" y="%d">%s</text>`+"\n",
			lx, y, kindColor[k], lx+16, y+11, k)
		lx += 120
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// metricInfo returns the entry of Metrics for key.
func metricInfo(key string) MetricInfo {
	for _, m := range Metrics {
		if m.Key == key {
			return m
		}
	}
	return MetricInfo{Key: key, Title: key}
}
