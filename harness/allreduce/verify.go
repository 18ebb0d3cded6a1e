package allreduce

import "fmt"

// The EAGLE-3 verify pass of the published PCIe account
// (docs/pcie-dispatch.md, "Calibration of the root-complex reads"): 122
// allreduces per verify pass, each of 4 tokens x hidden 5120 in bf16,
// 40 KiB (40960 bytes; the account says ~42 KB). This is the one home of
// those figures: `arpatch bench allreduce --shape` and `--count` and
// `arpatch tune allreduce --hidden` default to them, the bench's
// preflight and doctor's traffic expectations measure at VerifyBytes,
// the nightly's tune record takes VerifyHidden for its serving sizes, and
// harness/traffic's anchors are fitted to VerifyCount.
const (
	VerifyTokens = 4                                       // tokens per verify pass (the draft tokens)
	VerifyHidden = 5120                                    // the model's hidden size
	VerifyCount  = 122                                     // allreduces per verify pass
	VerifyBytes  = VerifyTokens * VerifyHidden * BF16Bytes // one allreduce of the pass, in bytes
)

// BF16Bytes is the bytes of one bf16 element (the verify shape's, the
// tune's serving sizes').
const BF16Bytes = 2

// VerifyShape is the verify pass's allreduce: 4 tokens x hidden 5120 x
// bf16 = 40K.
var VerifyShape = Shape{Tokens: VerifyTokens, Hidden: VerifyHidden, ElemBytes: BF16Bytes}

// DefaultVerify is the verify pass whose cost a report predicts when the
// caller gives no other: VerifyCount allreduces of VerifyShape.
func DefaultVerify() Verify {
	return Verify{Count: VerifyCount, Shape: VerifyShape, Bytes: VerifyShape.Bytes()}
}

// Spec is the shape as ParseShape reads it, TOKENSxHIDDEN ("4x5120").
func (s Shape) Spec() string { return fmt.Sprintf("%dx%d", s.Tokens, s.Hidden) }
