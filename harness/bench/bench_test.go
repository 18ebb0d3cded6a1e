package bench

import (
	"net/http/httptest"
	"testing"
	"time"

	"github.com/arpatch/arpatch/harness/sglangtest"
)

// serve serves an in-test server over loopback (paced by instant).
func serve(t *testing.T, cfg sglangtest.Config) (*sglangtest.Server, string) {
	t.Helper()
	cfg = instant(cfg)
	s := sglangtest.New(cfg)
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	return s, ts.URL
}

// instant paces an in-test server for the tests that run Run over
// loopback, on the wall clock, and assert no timing (verdicts,
// agreement, failures): unless cfg sets them, every token is due at once
// (TTFT 1 ns, 1e9 tok/s), so a stream is sent as fast as the client reads
// it and these tests wait on nothing but their own work.
func instant(cfg sglangtest.Config) sglangtest.Config {
	if cfg.TokPerSec == 0 {
		cfg.TokPerSec = 1e9
	}
	if cfg.TTFT == 0 {
		cfg.TTFT = time.Nanosecond
	}
	return cfg
}

// serveOn serves an in-test server on an in-memory network (a test in a
// synctest bubble, where its timing is exact).
func serveOn(n *sglangtest.Network, cfg sglangtest.Config) string {
	u, _ := n.Serve(sglangtest.New(cfg))
	return u
}
