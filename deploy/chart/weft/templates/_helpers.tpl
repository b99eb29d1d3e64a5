{{/*
weft.image is weftd's image reference: repository:tag, and @digest when a digest is set.
*/}}
{{- define "weft.image" -}}
{{- $img := .Values.flannel.image -}}
{{- if not $img.repository }}{{ fail "flannel.image.repository is empty" }}{{ end -}}
{{- if eq (toString $img.repository) "ghcr.io/flannel-io/flannel" -}}
{{- fail "flannel.image.repository names flannel's image (ghcr.io/flannel-io/flannel): weft's chart runs weftd; drop flannel.image from your values or name weft's image" -}}
{{- end -}}
{{- $ref := printf "%s:%s" (toString $img.repository) (toString $img.tag) -}}
{{- with $img.digest -}}
{{- if not (regexMatch "^sha256:[0-9a-f]{64}$" (toString .)) -}}
{{- fail (printf "flannel.image.digest must be sha256: and 64 lower-case hex digits, or empty; got %q" (toString .)) -}}
{{- end -}}
{{- $ref = printf "%s@%s" $ref (toString .) -}}
{{- end -}}
{{- $ref -}}
{{- end -}}

{{/*
weft.validate fails the render on values of flannel's chart that weft cannot honour.
*/}}
{{- define "weft.validate" -}}
{{- if not (has (toString .Values.flannel.backend) (list "vxlan" "host-gw" "udp" "wireguard")) -}}
{{- fail (printf "flannel.backend %q: weft's chart runs vxlan, host-gw, udp or wireguard" (toString .Values.flannel.backend)) -}}
{{- end -}}
{{- if and (not .Values.podCidr) (not .Values.podCidrv6) -}}
{{- fail "podCidr and podCidrv6 are both empty: set the cluster's pod network" -}}
{{- end -}}
{{- end -}}

{{/*
weft.netConf is net-conf.json as a dict: flannel's chart's keys for each backend.
*/}}
{{- define "weft.netConf" -}}
{{- $f := .Values.flannel -}}
{{- $net := dict -}}
{{- if .Values.podCidr -}}
{{- $_ := set $net "Network" (toString .Values.podCidr) -}}
{{- else -}}
{{- $_ := set $net "EnableIPv4" false -}}
{{- end -}}
{{- if .Values.podCidrv6 -}}
{{- $_ := set $net "IPv6Network" (toString .Values.podCidrv6) -}}
{{- $_ := set $net "EnableIPv6" true -}}
{{- end -}}
{{- if $f.enableNFTables -}}
{{- $_ := set $net "EnableNFTables" true -}}
{{- end -}}
{{- $b := dict "Type" (toString $f.backend) -}}
{{- if eq $f.backend "vxlan" -}}
{{- with $f.backendPort }}{{ $_ := set $b "Port" (int .) }}{{ end -}}
{{- with $f.vni }}{{ $_ := set $b "VNI" (int .) }}{{ end -}}
{{- with $f.GBP }}{{ $_ := set $b "GBP" true }}{{ end -}}
{{- with $f.directRouting }}{{ $_ := set $b "DirectRouting" true }}{{ end -}}
{{- with $f.mtu }}{{ $_ := set $b "MTU" (int .) }}{{ end -}}
{{- with $f.macPrefix }}{{ $_ := set $b "MacPrefix" (toString .) }}{{ end -}}
{{- else if eq $f.backend "wireguard" -}}
{{- with $f.backendPort }}{{ $_ := set $b "ListenPort" (int .) }}{{ end -}}
{{- with $f.backendPortv6 }}{{ $_ := set $b "ListenPortV6" (int .) }}{{ end -}}
{{- with $f.psk }}{{ $_ := set $b "PSK" (toString .) }}{{ end -}}
{{- with $f.mtu }}{{ $_ := set $b "MTU" (int .) }}{{ end -}}
{{- with $f.tunnelMode }}{{ $_ := set $b "Mode" (toString .) }}{{ end -}}
{{- with $f.keepaliveInterval }}{{ $_ := set $b "PersistentKeepaliveInterval" (int .) }}{{ end -}}
{{- else if eq $f.backend "udp" -}}
{{- with $f.backendPort }}{{ $_ := set $b "Port" (int .) }}{{ end -}}
{{- with $f.mtu }}{{ $_ := set $b "MTU" (int .) }}{{ end -}}
{{- end -}}
{{- $_ := set $net "Backend" $b -}}
{{- toPrettyJson $net -}}
{{- end -}}
