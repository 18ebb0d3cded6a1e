package gaterule

import (
	"slices"
	"testing"
)

// TestIRCuts reads the constants of comparisons and switch cases from
// LLVM IR as clang writes it, and nothing else: not a store's, a call's
// or a getelementptr's constants, nor a negative or zero one.
func TestIRCuts(t *testing.T) {
	ir := `define void @f(i64 noundef %bytes, i32 noundef %ws) {
entry:
  %cmp = icmp ne i64 %bytes, 100016
  %cmp1 = icmp ult i64 %bytes, 65536
  %cmp2 = icmp sgt i32 %ws, -1
  %cmp3 = icmp eq i64 %bytes, 0
  store i64 777777, ptr %p, align 8
  %call = call i32 @g(i32 noundef 424242)
  %arrayidx = getelementptr inbounds [8 x i64], ptr %a, i64 0, i64 31337
  switch i32 %ws, label %sw.default [
    i32 2, label %sw.bb
    i32 4, label %sw.bb1
    i32 8, label %sw.bb2
  ]
  %x = add i64 %bytes, 999999
  ret void
}
`
	if got, want := irCuts([]byte(ir)), []uint64{2, 4, 8, 65536, 100016}; !slices.Equal(got, want) {
		t.Errorf("irCuts = %v, want %v", got, want)
	}
}
