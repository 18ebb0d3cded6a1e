package bounds

import (
	"testing"
	"time"
)

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		key  string
		v    int64
		want string
	}{
		{"num_prompts", 9223372036854775807, "9223372036854775807: use 1 to 100000"},
		{"num_prompts", 0, "0: use 1 to 100000"},
		{"warmup", -1, "-1: use 0 to 10000"},
		{"concurrency", 4097, "4097: use 1 to 4096"},
		{"warmup", 0, ""},
		{"concurrency", 4096, ""},
	} {
		err := Check(tc.key, tc.v)
		if got := ""; err != nil {
			got = err.Error()
			if got != tc.want {
				t.Errorf("Check(%s, %d) = %q, want %q", tc.key, tc.v, got, tc.want)
			}
		} else if tc.want != "" {
			t.Errorf("Check(%s, %d) passed, want %q", tc.key, tc.v, tc.want)
		}
	}
	if err := CheckDuration("request_timeout", 25*time.Hour); err == nil || err.Error() != "25h0m0s: use 1s to 24h0m0s" {
		t.Errorf("duration: %v", err)
	}
	if err := CheckDuration("ready_timeout", 20*time.Minute); err != nil {
		t.Errorf("20m: %v", err)
	}
}
