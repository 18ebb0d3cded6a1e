package kernels

import (
	"archive/zip"
	"bytes"
	"encoding/base64"
	"encoding/csv"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// minZipTime is the earliest time a zip entry can hold (MS-DOS time
// starts in 1980); an earlier SOURCE_DATE_EPOCH is clamped to it, as
// scikit-build-core's WheelWriter.timestamp does.
var minZipTime = time.Date(1980, 1, 1, 0, 0, 0, 0, time.UTC)

// NormalizeWheel rewrites the wheel at path so that its bytes depend on
// its contents only: entries sorted by name with the .dist-info directory
// last and its RECORD the very last entry (as the wheel spec recommends),
// every timestamp at epoch (seconds, UTC; clamped to 1980-01-01), modes
// 0644, or 0755 for an entry with any execute bit, no extra fields, and
// RECORD's rows rewritten in that order with each file's sha256 and size
// as they are. Compressed data is copied as it is (archive/zip's raw
// copy), so the compression stays the builder's own.
//
// scikit-build-core, the backend of sgl-kernel's pyproject.toml, already
// honours SOURCE_DATE_EPOCH for timestamps and writes sorted entries, but
// takes each entry's mode from the file on disk, which the user's umask
// decides (Upstream: scikit-build/scikit-build-core
// src/scikit_build_core/build/_wheelfile.py (WheelWriter.write)); the
// rewrite makes that, and any builder that differs, deterministic.
//
// The file is replaced atomically; an error names the wheel and leaves
// it as it was.
func NormalizeWheel(path string, epoch int64) error {
	zr, err := zip.OpenReader(path)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	defer func() { _ = zr.Close() }() // read-only: Close has nothing to report
	files := append([]*zip.File(nil), zr.File...)
	sort.SliceStable(files, func(i, j int) bool { return wheelOrder(files[i].Name) < wheelOrder(files[j].Name) })
	when := time.Unix(epoch, 0).UTC()
	if when.Before(minZipTime) {
		when = minZipTime
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer func() { _ = os.Remove(tmp.Name()) }() // gone once renamed over path; else a hidden temp
	zw := zip.NewWriter(tmp)
	var record *zip.File
	var rows [][]string
	for _, f := range files {
		if isRecord(f.Name) {
			record = f
			continue
		}
		if !strings.HasSuffix(f.Name, "/") {
			sum, n, err := zipEntrySHA256(f)
			if err != nil {
				return fmt.Errorf("%s: %s: %w", path, f.Name, err)
			}
			b, _ := hex.DecodeString(sum)
			rows = append(rows, []string{f.Name, "sha256=" + base64.RawURLEncoding.EncodeToString(b), strconv.FormatInt(n, 10)})
		}
		if err := copyEntry(zw, f, when); err != nil {
			return fmt.Errorf("%s: %s: %w", path, f.Name, err)
		}
	}
	if record != nil {
		rows = append(rows, []string{record.Name, "", ""})
		var buf bytes.Buffer
		cw := csv.NewWriter(&buf)
		if err := cw.WriteAll(rows); err != nil {
			return fmt.Errorf("%s: %s: %w", path, record.Name, err)
		}
		old, err := readEntry(record)
		if err != nil {
			return fmt.Errorf("%s: %s: %w", path, record.Name, err)
		}
		if bytes.Equal(old, buf.Bytes()) {
			err = copyEntry(zw, record, when)
		} else {
			fh := &zip.FileHeader{Name: record.Name, Method: zip.Store} // stored: no dependence on Go's compressor
			setHeader(fh, 0o644, when)
			var w io.Writer
			if w, err = zw.CreateHeader(fh); err == nil {
				_, err = w.Write(buf.Bytes())
			}
		}
		if err != nil {
			return fmt.Errorf("%s: %s: %w", path, record.Name, err)
		}
	}
	if err := zw.Close(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// wheelOrder sorts a wheel's entries: the package's files by name, then
// the .dist-info directory's, RECORD last.
func wheelOrder(name string) string {
	switch {
	case isRecord(name):
		return "2" + name
	case strings.Contains(strings.SplitN(name, "/", 2)[0], ".dist-info"):
		return "1" + name
	}
	return "0" + name
}

func isRecord(name string) bool {
	dir, file := pathSplit(name)
	return file == "RECORD" && strings.HasSuffix(dir, ".dist-info") && !strings.Contains(dir, "/")
}

func pathSplit(name string) (string, string) {
	i := strings.LastIndex(name, "/")
	if i < 0 {
		return "", name
	}
	return name[:i], name[i+1:]
}

// copyEntry copies f's compressed bytes into zw under a normalised header.
func copyEntry(zw *zip.Writer, f *zip.File, when time.Time) error {
	fh := &zip.FileHeader{
		Name: f.Name, Method: f.Method,
		CRC32: f.CRC32, CompressedSize64: f.CompressedSize64, UncompressedSize64: f.UncompressedSize64,
	}
	mode := fs.FileMode(0o644)
	switch {
	case strings.HasSuffix(f.Name, "/"):
		mode = fs.ModeDir | 0o755
	case f.Mode()&0o111 != 0:
		mode = 0o755
	}
	setHeader(fh, mode, when)
	r, err := f.OpenRaw()
	if err != nil {
		return err
	}
	w, err := zw.CreateRaw(fh)
	if err != nil {
		return err
	}
	_, err = io.Copy(w, r)
	return err
}

func readEntry(f *zip.File) ([]byte, error) {
	r, err := f.Open()
	if err != nil {
		return nil, err
	}
	defer func() { _ = r.Close() }() // Read reports a bad checksum, at EOF; Close has nothing more
	return io.ReadAll(r)
}

func zipEntrySHA256(f *zip.File) (string, int64, error) {
	r, err := f.Open()
	if err != nil {
		return "", 0, err
	}
	defer func() { _ = r.Close() }() // Read reports a bad checksum, at EOF; Close has nothing more
	return readerSHA256(r)
}

// setHeader gives an entry its normalised mode (a Unix creator, so
// readers take it) and MS-DOS time, with no extra fields.
func setHeader(fh *zip.FileHeader, mode fs.FileMode, when time.Time) {
	fh.SetMode(mode)
	fh.CreatorVersion = fh.CreatorVersion&0xff00 | 20
	fh.ReaderVersion = 20
	fh.Flags &^= 0x8 // sizes and CRC in the header, no data descriptor
	fh.Extra = nil
	// The MS-DOS date and time fields, deprecated in favour of Modified,
	// on purpose: CreateRaw (copyEntry) ignores Modified and writes these
	// as they are, and CreateHeader (RECORD) turns a set Modified into an
	// extended-timestamp extra field, which the normalised wheel must not
	// have (Upstream: golang/go src/archive/zip/writer.go@go1.26.8
	// (Writer.CreateHeader, Writer.CreateRaw)).
	//lint:ignore SA1019 Modified would be ignored or add an extra field; see above
	fh.ModifiedDate, fh.ModifiedTime = uint16((when.Year()-1980)<<9|int(when.Month())<<5|when.Day()), uint16(when.Hour()<<11|when.Minute()<<5|when.Second()/2)
}
