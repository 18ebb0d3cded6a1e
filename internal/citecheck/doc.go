// Package citecheck holds no code: its test keeps every upstream SGLang
// fact cited in Go comments in one form,
//
//	Upstream: path@commit (function)
//
// where path is a file of SGLang's tree (python/sglang/..., sgl-kernel/...,
// csrc/...; a mention as sglang/... is checked too), commit is 12 to 40 hex digits of the commit the fact was read
// at, and function names what in the file says it ("also at C2 and C3"
// may follow). A path in quotes or backticks is an example or a value,
// not a citation, and is not checked.
package citecheck
