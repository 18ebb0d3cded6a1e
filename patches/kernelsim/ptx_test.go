package kernelsim

import (
	"errors"
	"strings"
	"testing"
)

// TestEmulatePTX: upstream's flag stores and loads become calls into
// cxx/ptx.h with their operands, lines kept; asm in a system header is
// left alone; any other asm in the series' code is refused with its file
// and line.
func TestEmulatePTX(t *testing.T) {
	in := "# 1 \"kernels.h\"\n" +
		"void f(unsigned* a, unsigned v) {\n" +
		"  asm volatile(\"st.release.sys.global.u32 [%1], %0;\" ::\"r\"(v), \"l\"(a));\n" +
		"  unsigned w;\n" +
		"  asm volatile(\"ld.acquire.sys.global.u32 %0, [%1];\"\n    : \"=r\"(w) : \"l\"(a + 1));\n" +
		"  __asm__ __volatile__(\"membar.sys; st.volatile.global.u32 [%1], %0;\" : : \"r\"(w), \"l\"(a) : \"memory\");\n" +
		"}\n" +
		"# 7 \"/usr/include/x.h\" 1 3\n" +
		"extern int g(void) __asm__(\"\" \"g2\");\n"
	out, err := emulatePTX(in)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"kernelsim_ptx_store((void*)(a), (v), 1);\n",
		"kernelsim_ptx_load((const void*)(a + 1), &(w), 2)\n;\n",
		"kernelsim_ptx_store((void*)(a), (w), 3);\n",
		`extern int g(void) __asm__("" "g2");`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("emulated text lacks %q:\n%s", want, out)
		}
	}
	if strings.Count(out, "\n") != strings.Count(in, "\n") {
		t.Errorf("lines %d, want %d", strings.Count(out, "\n"), strings.Count(in, "\n"))
	}
	for _, c := range []struct{ src, why string }{
		{"asm volatile(\"exit;\");", `"exit;" in the device pass: not one of upstream's PTX templates`},
		{"asm(\"st.release.sys.global.u32 [%1], %0;\" :: \"l\"(v), \"l\"(a));", "a store with operands ( : l,l)"},
		{"asm volatile(\"\" ::: \"cc\");", `clobbers "cc"`},
		{"asm goto(\"\" :::: out);", "asm goto"},
		{"__asm(\"trap;\");", `"trap;"`},
	} {
		_, err := emulatePTX("# 1 \"kernels.h\"\n\n" + c.src + "\n")
		var ue *UnknownAsmError
		if !errors.As(err, &ue) || ue.File != "kernels.h" || !strings.Contains(err.Error(), c.why) {
			t.Errorf("%s: err = %v, want an UnknownAsmError in kernels.h saying %q", c.src, err, c.why)
		}
	}
}
