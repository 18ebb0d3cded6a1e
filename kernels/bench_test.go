package kernels

import (
	"context"
	"testing"
)

// BenchmarkCacheHit measures `arpatch build` when the result is cached:
// reading the apply state, git status, scanning FetchContent, the probe
// (answered from the probe cache), the key, and the lookup that verifies
// the wheel's sha256. The fixture's tools are fake, so this is arpatch's
// own cost.
//
//	go test -run XXX -bench CacheHit ./kernels
func BenchmarkCacheHit(b *testing.B) {
	e := newEnv(b)
	o := e.opts()
	if _, err := Build(context.Background(), mustPlan(b, o), o, nil); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		plan := mustPlan(b, o)
		res, err := Build(context.Background(), plan, o, nil)
		if err != nil || !res.Hit {
			b.Fatalf("not a hit: %v", err)
		}
	}
}
