package digest

import "testing"

// The digests of "" and "abc" are FIPS 180-2's test vectors.
func TestSHA256Hex(t *testing.T) {
	for in, want := range map[string]string{
		"":    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
		"abc": "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
	} {
		if got := SHA256Hex([]byte(in)); got != want {
			t.Errorf("SHA256Hex(%q) = %s, want %s", in, got, want)
		}
	}
}

func TestIsSHA256Hex(t *testing.T) {
	abc := SHA256Hex([]byte("abc"))
	for s, want := range map[string]bool{abc: true, abc[:63]: false, abc + "0": false, "BA" + abc[2:]: false, "g" + abc[1:]: false, "": false} {
		if IsSHA256Hex(s) != want {
			t.Errorf("IsSHA256Hex(%q) = %v", s, !want)
		}
	}
}

func TestShort(t *testing.T) {
	abc := SHA256Hex([]byte("abc"))
	for in, want := range map[string]string{
		abc:             "ba7816bf8f01",
		"sha256:" + abc: "sha256:ba7816bf8f01",
		"SHA256=" + abc: "SHA256=ba7816bf8f01",
		"ba7816":        "ba7816",
		"":              "",
	} {
		if got := Short(in); got != want {
			t.Errorf("Short(%q) = %q, want %q", in, got, want)
		}
	}
}
