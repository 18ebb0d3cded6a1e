package gitsrc

import (
	"io/fs"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/format/index"
)

// TestStatCleanRacyInWholeSeconds: an entry whose mtime falls in the
// index file's second is racily clean even when it is nanoseconds before
// the index's mtime: a work tree on a file system with whole-second times
// (the index on another, finer one) records S.000 for an edit made at
// S.300 after an index written at S.017. An entry a second older is
// trusted on its stat data.
func TestStatCleanRacyInWholeSeconds(t *testing.T) {
	sec := time.Date(2026, 11, 30, 15, 0, 0, 0, time.UTC)
	indexTime := sec.Add(17 * time.Millisecond)
	for _, tc := range []struct {
		mtime time.Time
		clean bool
	}{
		{sec, false},                             // same second, before the index's nanoseconds
		{indexTime, false},                       // same instant
		{sec.Add(-time.Second), true},            // the second before
		{sec.Add(-time.Nanosecond), true},        // the last nanosecond of the second before
		{sec.Add(999 * time.Millisecond), false}, // same second, after
	} {
		e := &index.Entry{Name: "README.md", Mode: filemode.Regular, Size: 5, ModifiedAt: tc.mtime}
		st := fileStat{mode: fs.FileMode(0o644), size: 5, mtime: tc.mtime}
		for _, dev := range []uint32{0, 8} { // unknown; another device than the index's 7
			e.Dev = dev
			if got := statClean(e, st, indexTime, 7); got != tc.clean {
				t.Errorf("device %d, mtime %s, index %s: statClean = %v, want %v", dev, tc.mtime.Format(time.RFC3339Nano), indexTime.Format(time.RFC3339Nano), got, tc.clean)
			}
		}
	}
}

// TestStatCleanRacyToTheNanosecond: an entry recorded on the index
// file's own device shares its clock and granularity, so only an mtime
// at or after the index's is racily clean: a checkout's files, written
// before its index, are trusted on their stat data.
func TestStatCleanRacyToTheNanosecond(t *testing.T) {
	sec := time.Date(2026, 11, 30, 15, 0, 0, 0, time.UTC)
	indexTime := sec.Add(17 * time.Millisecond)
	for _, tc := range []struct {
		mtime time.Time
		clean bool
	}{
		{sec, true},                              // same second, before the index's nanoseconds
		{indexTime.Add(-time.Nanosecond), true},  // just before
		{indexTime, false},                       // same instant
		{indexTime.Add(time.Nanosecond), false},  // after
		{sec.Add(999 * time.Millisecond), false}, // same second, after
	} {
		e := &index.Entry{Name: "README.md", Mode: filemode.Regular, Size: 5, ModifiedAt: tc.mtime, Dev: 7}
		st := fileStat{mode: fs.FileMode(0o644), size: 5, mtime: tc.mtime}
		if got := statClean(e, st, indexTime, 7); got != tc.clean {
			t.Errorf("mtime %s, index %s: statClean = %v, want %v", tc.mtime.Format(time.RFC3339Nano), indexTime.Format(time.RFC3339Nano), got, tc.clean)
		}
	}
}
