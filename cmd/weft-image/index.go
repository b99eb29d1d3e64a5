package main

import (
	"context"
	"fmt"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// buildIndex builds one image per spec and the OCI image index of them all, in the
// order given: same specs, same index digest.
func buildIndex(ctx context.Context, specs []spec) (v1.ImageIndex, []v1.Image, error) {
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	var imgs []v1.Image
	seen := map[string]bool{}
	for _, s := range specs {
		if seen[s.Platform.String()] {
			return nil, nil, fmt.Errorf("%s given twice", s.Platform)
		}
		seen[s.Platform.String()] = true
		img, err := build(ctx, s)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", s.Platform, err)
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add: img,
			Descriptor: v1.Descriptor{
				MediaType: types.OCIManifestSchema1,
				Platform:  &v1.Platform{OS: "linux", Architecture: s.Platform.GOARCH, Variant: s.Platform.Variant},
			},
		})
		imgs = append(imgs, img)
	}
	if len(imgs) == 0 {
		return nil, nil, fmt.Errorf("no platforms")
	}
	return idx, imgs, nil
}

// imageSize is what pulling img moves: its manifest, config and compressed layers.
func imageSize(img v1.Image) (int64, error) {
	m, err := img.Manifest()
	if err != nil {
		return 0, err
	}
	raw, err := img.RawManifest()
	if err != nil {
		return 0, err
	}
	n := int64(len(raw)) + m.Config.Size
	for _, l := range m.Layers {
		n += l.Size
	}
	return n, nil
}
