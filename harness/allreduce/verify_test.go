package allreduce

import "testing"

// The published account's verify pass, as every default takes it: 122
// allreduces of 4 tokens x hidden 5120 x bf16 = 40960 bytes, a shape
// ParseShape reads back from its Spec.
func TestVerifyPass(t *testing.T) {
	if VerifyBytes != 40960 || VerifyShape.Bytes() != VerifyBytes || VerifyCount != 122 {
		t.Errorf("verify pass: %d bytes (shape %d), %d allreduces", VerifyBytes, VerifyShape.Bytes(), VerifyCount)
	}
	if got := VerifyShape.String(); got != "4 tokens x hidden 5120 x bf16 = 40K" {
		t.Errorf("VerifyShape = %q", got)
	}
	s, err := ParseShape(VerifyShape.Spec())
	if err != nil || s != VerifyShape || VerifyShape.Spec() != "4x5120" {
		t.Errorf("ParseShape(%q) = %+v, %v", VerifyShape.Spec(), s, err)
	}
	if v := DefaultVerify(); v.Count != 122 || v.Shape != VerifyShape || v.Bytes != 40960 {
		t.Errorf("DefaultVerify() = %+v", v)
	}
}
