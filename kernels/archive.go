package kernels

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// unpackDeps unpacks every dependency of the plan that MapDeps found as an
// archive into its Dir under tmp (the build's temp directory), checking
// that the archive still has the sha256 the key recorded.
func unpackDeps(plan *Plan, tmp string) error {
	for _, d := range plan.Deps {
		if d.Archive == "" {
			continue
		}
		want := strings.TrimPrefix(d.Commit, "archive-sha256:")
		dst := strings.ReplaceAll(d.Dir, TmpMarker, tmp)
		if err := unpackTarGz(d.Archive, dst, want); err != nil {
			return fmt.Errorf("dependency %s: %w", d.Name, err)
		}
	}
	return nil
}

// unpackTarGz unpacks the gzip'd tar archive src into the directory dst
// (which must not exist), as CMake's FetchContent does: when the archive
// holds a single top-level directory (GitHub's <repo>-<rev>/), its
// contents become dst. Regular files, directories and symlinks that stay
// inside dst are unpacked; an entry that would leave dst, or any other
// kind (device, fifo), is an error. When wantSHA256 is given, the
// archive's bytes must hash to it, or dst is removed and an error names
// both. Errors name the archive and the entry.
func unpackTarGz(src, dst, wantSHA256 string) (err error) {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }() // read-only: Close has nothing to report
	h := sha256.New()
	zr, err := gzip.NewReader(io.TeeReader(f, h))
	if err != nil {
		return fmt.Errorf("%s: not a gzip'd tar archive: %w", src, err)
	}
	stage := dst + ".unpack"
	if err := os.MkdirAll(stage, 0o755); err != nil {
		return err
	}
	defer func() {
		// A stage left behind would mix into the next unpack to dst.
		if rerr := os.RemoveAll(stage); rerr != nil && err == nil {
			err = fmt.Errorf("removing %s: %w", stage, rerr)
		}
		if err != nil {
			if rerr := os.RemoveAll(dst); rerr != nil {
				err = fmt.Errorf("%w; the partial %s could not be removed (%v): remove it", err, dst, rerr)
			}
		}
	}()
	tr := tar.NewReader(zr)
	for {
		hd, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("%s: %w", src, err)
		}
		if err := unpackEntry(src, stage, tr, hd); err != nil {
			return err
		}
	}
	if _, err := io.Copy(h, f); err != nil { // the hash covers the whole file, trailing bytes too
		return fmt.Errorf("%s: %w", src, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); wantSHA256 != "" && got != wantSHA256 {
		return fmt.Errorf("%s changed since the plan: sha256 %s, recorded %s", src, got, wantSHA256)
	}
	root := stage
	if ents, err := os.ReadDir(stage); err == nil && len(ents) == 1 && ents[0].IsDir() {
		root = filepath.Join(stage, ents[0].Name())
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	return os.Rename(root, dst)
}

// unpackEntry writes the tar entry hd, read from tr, under stage (the
// directory the archive src unpacks into): a directory, a regular file
// (executable when any x bit is set) or a link that stays inside stage.
// git archive's global header and the "." entry are skipped. Errors name
// src and the entry.
func unpackEntry(src, stage string, tr *tar.Reader, hd *tar.Header) (err error) {
	if hd.Typeflag == tar.TypeXGlobalHeader { // git archive's commit id
		return nil
	}
	name := path.Clean(strings.TrimPrefix(hd.Name, "./"))
	if name == "." {
		return nil
	}
	if path.IsAbs(name) || name == ".." || strings.HasPrefix(name, "../") {
		return fmt.Errorf("%s: entry %s leaves the directory it unpacks into", src, hd.Name)
	}
	p := filepath.Join(stage, filepath.FromSlash(name))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	switch hd.Typeflag {
	case tar.TypeDir:
		if err := os.MkdirAll(p, 0o755); err != nil {
			return err
		}
	case tar.TypeReg:
		mode := os.FileMode(0o644)
		if hd.Mode&0o111 != 0 {
			mode = 0o755
		}
		out, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
		if err != nil {
			return err
		}
		_, err = io.Copy(out, tr)
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("%s: entry %s: %w", src, hd.Name, err)
		}
	case tar.TypeSymlink, tar.TypeLink:
		target := hd.Linkname
		if hd.Typeflag == tar.TypeSymlink {
			target = path.Join(path.Dir(name), hd.Linkname)
		}
		target = path.Clean(target)
		if path.IsAbs(hd.Linkname) || target == ".." || strings.HasPrefix(target, "../") {
			return fmt.Errorf("%s: link %s -> %s leaves the directory it unpacks into", src, hd.Name, hd.Linkname)
		}
		if hd.Typeflag == tar.TypeSymlink {
			err = os.Symlink(hd.Linkname, p)
		} else {
			err = os.Link(filepath.Join(stage, filepath.FromSlash(target)), p)
		}
		if err != nil {
			return fmt.Errorf("%s: entry %s: %w", src, hd.Name, err)
		}
	default:
		return fmt.Errorf("%s: entry %s is neither a file, a directory nor a link (type %q)", src, hd.Name, hd.Typeflag)
	}
	return nil
}
