module github.com/weftnet/weft

go 1.26.8

require github.com/vishvananda/netns v0.0.5

require golang.org/x/sys v0.49.0 // indirect
