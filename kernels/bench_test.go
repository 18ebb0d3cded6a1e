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
func BenchmarkCacheHit(b *testing.B) { benchCacheHit(b, newEnv(b)) }

// BenchmarkCacheHitSized is BenchmarkCacheHit on a checkout shaped like
// SGLang's (testrepo.WriteSized: 4,303 more files in one deltified pack),
// where status and the untracked-file guards see a tree of upstream's
// size.
func BenchmarkCacheHitSized(b *testing.B) { benchCacheHit(b, newEnvWith(b, oldLayout, true)) }

func benchCacheHit(b *testing.B, e *env) {
	o := e.opts()
	if _, err := Build(context.Background(), mustPlan(b, o), o, nil); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		plan := mustPlan(b, o)
		res, err := Build(context.Background(), plan, o, nil)
		if err != nil || !res.Hit {
			b.Fatalf("not a hit: %v", err)
		}
	}
}
