// fakeserver is a real subprocess for the launcher tests: it serves the
// SGLang protocol through harness/sglangtest, and can misbehave on request.
//
//	fakeserver -port N [-start-delay 2s] [-exit-early] [-ignore-term] [-child PIDFILE]
package main

import (
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"github.com/arpatch/arpatch/harness/sglangtest"
)

func main() {
	port := flag.Int("port", 0, "port")
	delay := flag.Duration("start-delay", 0, "answer /health_generate after this")
	exitEarly := flag.Bool("exit-early", false, "print an error and exit 3 before becoming ready")
	ignoreTerm := flag.Bool("ignore-term", false, "ignore SIGTERM")
	child := flag.String("child", "", "start a child process and write its pid and ours to this file")
	flag.Parse()
	fmt.Println("loading model weights ... (fake)")
	if *exitEarly {
		fmt.Fprintln(os.Stderr, "RuntimeError: CUDA out of memory (fake)")
		os.Exit(3)
	}
	if *ignoreTerm {
		signal.Ignore(syscall.SIGTERM)
	}
	if *child != "" {
		c := exec.Command("sleep", "300")
		c.Start()
		os.WriteFile(*child, []byte(fmt.Sprintf("%d %d\n", os.Getpid(), c.Process.Pid)), 0o644)
	}
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", *port))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println("server listening")
	time.Sleep(10 * time.Millisecond)
	http.Serve(l, sglangtest.New(sglangtest.Config{TokPerSec: 500, StartDelay: *delay}))
}
