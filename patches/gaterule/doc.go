// Package gaterule holds arpatch's SGLang-specific safety rule: where a
// patched tree's Python gates admit SGLang's custom allreduce on a
// PCIe-only group, the kernel's dispatch must then launch a kernel, or
// throw, on every call. Upstream's dispatch does neither there, so opening
// the gates alone returns unreduced data, fast and without an error.
//
// It judges by effect, running both sides of the patched tree (the
// in-memory result, before anything is written), never by reading them:
//
//   - The Python judge (python.go, py/) imports the tree's gate modules as
//     Python resolves them from the tree's python/ directory: a package
//     that shadows a gate module counts, and so does every package
//     __init__ on the way. torch, torch.distributed, NVML, sgl-kernel's
//     binding, libcudart and the rest are stubs that answer as a PCIe-only
//     host of 2 to 8 GPUs does (no NVLink, P2P everywhere, two CPU
//     sockets); each rank is a thread and the collectives meet. It
//     constructs the class parallel_state would (dispatch_custom_allreduce
//     where the tree has it) on every rank and asks should_custom_ar about
//     sizes from 16 bytes to the 8 MiB buffer, and custom_all_reduce
//     whether an admitted call reaches sgl-kernel's all_reduce. It runs
//     with no variable set, with each variable the gates read set alone,
//     and, where one opened the gates, with every other one set beside it
//     (envValues: the pcie series' variables get their documented values
//     and one value each that is no value, which must be refused or still
//     launch; others "1"). The tree's files are read through a pipe from arpatch,
//     so nothing is written. Refused here: gates that admit through
//     another class than sgl-kernel's CustomAllreduce, ranks that admit
//     different sizes, and an admitted call that never reaches the kernel.
//   - The C++ judge (cxx.go, cxxrun.go, cxxcheck.go, cxx/) compiles the
//     patched custom_all_reduce.cuh, and the tree files it includes, as
//     the host pass of the real build sees it: clang's CUDA mode
//     (--cuda-host-only, which parses <<<...>>> itself and lowers each
//     launch to calls a stub runtime records), the build's own C++
//     standard and definitions (sglkernel.CUDAFlags: -DNDEBUG and the
//     rest), the macros nvcc defines (__CUDACC__ ...), and stub CUDA
//     headers, with no toolkit (one installed on the host changes
//     nothing: --cuda-path=/dev/null). Comments, line continuations,
//     #ifdef NDEBUG, macros, constexpr, if constexpr, lambdas and
//     try/catch are the compiler's.
//     A driver (cxx/judge.cu) constructs CustomAllreduce as init_custom_ar
//     does, with the environment and full_nvlink the Python gates handed
//     to it, registers a buffer, and calls allreduce for float, half and
//     nv_bfloat16, eager and under stream capture, at about 8000 sizes up
//     to the buffer (every 16 bytes to 16 KiB, every 64 to 64 KiB, every
//     4 KiB boundary and its neighbours, the powers of two, the Python
//     gates' limits, the header's decimal literals, and every integer
//     constant the compiled translation unit compares with or switches on,
//     read from its LLVM IR as the compiler folded it (6251 * 16 is
//     100016), taken as bytes, as 2- and 4-byte elements and as 16-byte
//     packs, each with its neighbours), on every rank of
//     the first environment that opens each world size. Wherever the gates
//     admit a call, it must launch exactly one kernel of a non-empty grid
//     (and a block of at most 1024 threads), or throw; no launch, two
//     launches, an empty grid, a crash or a hang is refused, naming the
//     world size, the environment, the rank, the call and the sizes. A
//     kernel arpatch knows (upstream's cross_device_reduce_1stage and
//     _2stage, the pcie series' pcie_push_*) must be instantiated for the
//     call's element type and world size and get the call's output (and
//     input), rank and size (the launch's recorded arguments); another
//     kernel is named in Report.Notes, what it computes not checked.
//   - The path proof (irproof.go) then covers every size, not only the
//     ones called: on the same translation unit's LLVM IR (at -O1, with
//     line tables, kept beside the judge), every path of allreduce<T>
//     from the driver's entries (arpatch_judge_allreduce_*) to a return
//     must pass a launch (a call of the stub runtime's launch recorders,
//     or of a function that launches on every path to its return),
//     whatever its conditions test: the size, a call counter, the
//     pointers, the time, the environment. Only loads of world_size_ and
//     full_nvlink_ are folded, to the values the driver read after each
//     construction (so a constructor that changes them is followed);
//     every other branch is taken both ways. A throw out of the function,
//     or a call that does not return, ends a path; a throw caught inside
//     and then a return does not. A function that runs on a constructed
//     CustomAllreduce (its members and their callees, constructors left
//     out) and stores to those members, hands their address on, or writes
//     the object through a cast of its own address is refused, and so is
//     a constructor that hands a member's address on: the folded values
//     would then be wrong. So is a dispatch that copies or sets device
//     memory (cudaMemcpy*, cudaMemset* on any path: it may overwrite the
//     kernel's sum). A refusal names the tree's lines on the path.
//   - The launch's stream must be the call's (a kernel on a stream of its
//     own races the work around it, and a CUDA graph never captures it),
//     and its dynamic shared memory at most 227 KiB (more, and the launch
//     fails with nothing run). The driver is compiled as the binding's
//     custom_all_reduce.cu and calls allreduce<T> with an int64_t size,
//     as the binding passes out.numel(), so the overload the real build
//     picks is the one judged. An explicit launch (cudaLaunchKernel of the
//     kernel itself, cudaLaunchKernelEx) is checked as a <<<...>>> one
//     is; a kernel arpatch knows launched by its address alone is
//     refused, since its arguments come without their types.
//   - The push kernels (push.go) the dispatch launches where the gates
//     admit a call run on the CPU (package kernelsim: every CUDA thread a
//     host thread, every rank a set of blocks) at sizes from each range
//     they are launched for, up to 256 KiB, on every rank, with the
//     islands the gates handed over; every element of every rank's output
//     must be the exact sum, or the tree is refused. They run as nvcc's
//     device pass of every arch from sm_80 (what the GPU runs:
//     __CUDA_ARCH__ and the arch's feature macros defined, the build's
//     -DNDEBUG, upstream's PTX flag stores and loads emulated, any other
//     inline assembly refused), archs that preprocess alike once; the
//     host pass must agree with each on the layout of Signal, RankSignals
//     and PcieIslands and on the islands it hands the kernels.
//
// Compiled judges are kept under the user's cache directory by content
// hash (the compiler, the flags, the judge's files and the tree's), and
// Python answers there and in memory with every read they made (each
// file's git blob id, each directory and each absent path the import
// tried: verdicts.go), found by the blob ids the tree already holds
// (Input.BlobID: a commit's tree entries, a clean checkout's index) with
// no file read, so `patches check --commit A..B` and an apply on a
// checkout judge again only where what the judge read differs.
//
// Where no clang++ is found, the C++ side is not checked and Report.Notes
// says so; where no python3 is found, or the gate modules cannot be
// imported or constructed under the judge, the gates of a series that
// changes SGLang's Python side (or carries the gate tags) are taken as
// open at every world size, and those of any other as upstream's, closed;
// the notes say which. So are the gates of a series that changes a file
// Python loads but the judge does not follow (Input.unfollowedPython: a
// compiled module, bytecode, a sitecustomize or a .pth file), whatever
// the judge found.
//
// Refused wherever the gates admit a call, because the judge cannot follow
// them: a series that changes the tree's custom_all_reduce.cu
// (torch-bound), include/utils.h (restated in cxx/utils.h), the op
// registration, sgl-kernel's Python wrapper of all_reduce, any other C,
// C++ or CUDA file of the library, a CMake file or the project's
// pyproject, setup or build script (blindChanged); and a tree the
// judge's one compile is not the real build of (variants.go): files that
// preprocess otherwise under another host compiler (g++ under nvcc),
// another CUDA toolkit, another time of the build or sgl-kernel's build
// options, however the test is spelt (a token paste, __has_builtin,
// __has_include); a test of the value of any compiler or toolkit version
// macro (each made unreadable in #if); code that compiles otherwise from
// another checkout path (__FILE__: a second compile from a path of one
// directory of the same length); a function or a variable the dispatch
// names that copies or sets device memory (a call through a pointer). A changed .py under python/ that the
// gates' imports do not read takes the gates as open at every world size
// (the server imports it before they decide).
//
// What it cannot check: upstream's pull kernels' sums (inline PTX: a GPU
// checks them, `arpatch bench allreduce`), those of a kernel it does not
// know (noted, not refused), and the push kernels' above 256 KiB or under
// the GPU's weaker memory ordering; the grid, block and arguments of a
// launch at sizes the judge does not call at (the proof asks only that a
// launch happens; the sampling judge checks what it launches, so a size
// of 0 handed to the kernel at one size it does not call at passes);
// code that launches otherwise after more calls than the judge makes, at
// another time, on other hardware than the stubs describe (the stubs
// declare the CUDA names upstream uses and some more: a test of a trait
// or of the existence of one they lack can still tell them apart from
// CUDA's headers), or for variables or values it does not drive;
// another host architecture (__aarch64__) and another libstdc++
// (_GLIBCXX_RELEASE, which its own headers define); members of
// CustomAllreduce the driver never calls (register_graph_buffers and the
// rest: not emitted, so not checked for writes to the folded members);
// a member changed through an address computed from another member (a
// byte offset from it), or set by the constructor from what differs
// between the judge's process and the server's (a weak symbol CPython
// defines); a __has_include whose header is named through a
// macro; Python gates that decide on what the stubs answer (an SM count),
// on the thread they run in (the judge's ranks are threads, the server's
// processes), or that catch sgl-kernel's exception and return the input;
// environment listings by upstream's own files at import, which are
// taken not to act on the judge's variables.
//
// It does not know arpatch's patch engine; package patches applies the
// rule (patches.CheckResult) to the result of a series.
//
// Upstream facts it rests on:
//   - The dispatch is CustomAllreduce::allreduce, constructed by
//     init_custom_ar with (Signal**, rank data, its size, rank, world
//     size, full_nvlink), its buffer registered by register_buffer, called
//     by all_reduce as allreduce<T>(stream, input, output, numel) for
//     float, half and nv_bfloat16.
//     Upstream: sgl-kernel/csrc/allreduce/custom_all_reduce.cuh@84118acf50b3 (CustomAllreduce::allreduce),
//     also at 8905cbd42f4a; from c32c4ef79cf5 under python/sglang/kernels/aot/.
//     Upstream: python/sglang/kernels/aot/csrc/allreduce/custom_all_reduce.cu@0bda0b168ad5 (init_custom_ar, all_reduce, register_buffer).
//   - The Python gates: can_use_custom_all_reduce_with_nvlink at init and
//     CustomAllreduce.should_custom_ar per call; parallel_state constructs
//     dispatch_custom_allreduce()'s class and catches its exceptions.
//     Upstream: python/sglang/srt/distributed/device_communicators/custom_all_reduce.py@84118acf50b3
//     (CustomAllreduce.should_custom_ar, dispatch_custom_allreduce), also at 8905cbd42f4a and 0bda0b168ad5.
//     Upstream: python/sglang/srt/distributed/device_communicators/custom_all_reduce_utils.py@84118acf50b3
//     (can_use_custom_all_reduce_with_nvlink, gpu_p2p_access_check).
//     Upstream: python/sglang/srt/distributed/parallel_state.py@84118acf50b3 (GroupCoordinator.__init__).
//   - sgl-kernel's include/utils.h throws cuda_error from
//     CHECK_CUDA_SUCCESS. Upstream: sgl-kernel/include/utils.h@84118acf50b3 (CHECK_CUDA_SUCCESS).
package gaterule
