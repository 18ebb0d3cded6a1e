// arpatch: a Python binding for sgl-kernel's custom allreduce entry points,
// so the allreduce of a patched tree can be loaded and measured without the
// hour-long sgl-kernel wheel build. It is compiled together with the tree's
// sgl-kernel/csrc/allreduce/custom_all_reduce.cu, which defines the
// functions declared below (same signatures in the 84118acf and 8905cbd4
// trees); this file adds no kernel code of its own.
#include <torch/extension.h>

#include <tuple>
#include <vector>

using fptr_t = int64_t;

fptr_t init_custom_ar(const std::vector<fptr_t>& fake_ipc_ptrs, torch::Tensor& rank_data, int64_t rank, bool full_nvlink);
void all_reduce(fptr_t fa, torch::Tensor& inp, torch::Tensor& out, fptr_t reg_buffer, int64_t reg_buffer_sz_bytes);
void dispose(fptr_t fa);
int64_t meta_size();
void register_buffer(fptr_t fa, const std::vector<fptr_t>& fake_ipc_ptrs);
std::tuple<std::vector<int64_t>, std::vector<int64_t>> get_graph_buffer_ipc_meta(fptr_t fa);
void register_graph_buffers(
    fptr_t fa, const std::vector<std::vector<int64_t>>& handles, const std::vector<std::vector<int64_t>>& offsets);

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "sgl-kernel custom allreduce, built alone by arpatch build --allreduce-ext";
  m.def(
      "init_custom_ar",
      [](const std::vector<fptr_t>& ipc_ptrs, torch::Tensor rank_data, int64_t rank, bool full_nvlink) {
        return init_custom_ar(ipc_ptrs, rank_data, rank, full_nvlink);
      },
      "Create the communicator: one Signal+scratch buffer pointer per rank (mapped into this process), "
      "a device buffer for registered pointer tuples, this rank, and whether all GPUs are NVLink-connected.");
  m.def(
      "all_reduce",
      [](fptr_t fa, torch::Tensor inp, torch::Tensor out, fptr_t reg_buffer, int64_t reg_buffer_bytes) {
        all_reduce(fa, inp, out, reg_buffer, reg_buffer_bytes);
      },
      "Sum inp over all ranks into out. With reg_buffer != 0, inp is first copied into that registered buffer.");
  m.def("dispose", &dispose, "Free the communicator.");
  m.def("meta_size", &meta_size, "Size in bytes of the per-rank Signal block.");
  m.def("register_buffer", &register_buffer, "Register one buffer per rank (mapped pointers) for all_reduce.");
  m.def("get_graph_buffer_ipc_meta", &get_graph_buffer_ipc_meta, "IPC handles of buffers captured in a CUDA graph.");
  m.def("register_graph_buffers", &register_graph_buffers, "Register every rank's graph-captured buffers.");
}
