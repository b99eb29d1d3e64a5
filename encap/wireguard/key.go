package wireguard

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// loadOrMakeKey reads the private key in path, base64 as `wg genkey` writes it; when
// there is no file, it makes a key and writes it there (mode 0400), once and for all.
func loadOrMakeKey(path string) (wgtypes.Key, bool, error) {
	data, err := os.ReadFile(path)
	switch {
	case err == nil:
		k, err := wgtypes.ParseKey(strings.TrimSpace(string(data)))
		if err != nil {
			return wgtypes.Key{}, false, fmt.Errorf("%s: %w", path, err)
		}
		return k, false, nil
	case !errors.Is(err, fs.ErrNotExist):
		return wgtypes.Key{}, false, err
	}
	k, err := wgtypes.GeneratePrivateKey()
	if err != nil {
		return wgtypes.Key{}, false, err
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return wgtypes.Key{}, false, err
	}
	// Written aside and renamed: a crash never leaves half a key behind.
	f, err := os.CreateTemp(dir, ".wgkey-")
	if err != nil {
		return wgtypes.Key{}, false, err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // a no-op once renamed
	_, err = f.WriteString(k.String() + "\n")
	if err == nil {
		err = f.Chmod(0o400)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		// Link, not rename: a key another process wrote meanwhile is kept.
		err = os.Link(tmp, path)
	}
	if errors.Is(err, fs.ErrExist) {
		return loadOrMakeKey(path)
	}
	if err != nil {
		return wgtypes.Key{}, false, err
	}
	return k, true, nil
}
