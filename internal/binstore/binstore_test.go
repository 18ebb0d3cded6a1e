package binstore

import (
	"os"
	"path/filepath"
	"testing"
)

func scratch(t *testing.T, root, content string) string {
	t.Helper()
	dir, err := os.MkdirTemp(root, ".build-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "bin"), []byte(content), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := Seal(filepath.Join(dir, "bin")); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestVerified(t *testing.T) {
	root := t.TempDir()
	bin := filepath.Join(scratch(t, root, "program"), "bin")
	if !Verified(bin) {
		t.Fatal("a sealed binary is not verified")
	}
	if err := os.WriteFile(bin, []byte("programX"), 0o755); err != nil {
		t.Fatal(err)
	}
	if Verified(bin) {
		t.Error("a binary changed after its seal is verified")
	}
	if err := os.Remove(bin + ".sha256"); err != nil {
		t.Fatal(err)
	}
	if Verified(bin) {
		t.Error("a binary without its sum is verified")
	}
	if Verified(filepath.Join(root, "missing")) {
		t.Error("a missing binary is verified")
	}
}

func TestPublish(t *testing.T) {
	root := t.TempDir()
	entry := filepath.Join(root, "key")
	// A damaged entry of the same key is replaced whole.
	if err := os.MkdirAll(entry, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(entry, "bin"), []byte("half"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := Publish(scratch(t, root, "first"), entry, "bin"); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(entry, "bin")); string(b) != "first" || !Verified(filepath.Join(entry, "bin")) {
		t.Fatalf("entry holds %q after publishing over a damaged one", b)
	}
	// A scratch that cannot be renamed (gone) fails unless a verified
	// entry stands.
	if err := Publish(filepath.Join(root, "gone"), filepath.Join(root, "other"), "bin"); err == nil {
		t.Error("publishing a missing scratch directory succeeded with no entry there")
	}
}
