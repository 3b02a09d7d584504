#include "comms/nccl/nccl_communicator.hpp"

#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

namespace actord::coll {

namespace {

// Whether p is GPU memory (device or managed); host memory, registered or not, and null are not.
bool on_device(const void* p) {
  if (p == nullptr) return false;
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged;
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(std::unique_ptr<Communicator> bootstrap, ncclComm_t comm, int device, cudaStream_t stream)
      : Communicator(with_backend(bootstrap->spec()), bootstrap->rank()),
        bootstrap_(std::move(bootstrap)),
        comm_(comm),
        device_(device),
        stream_(stream) {}
  ~NcclCommunicator() override {
    if (comm_) {
      cudaStreamSynchronize(stream_);
      ncclCommDestroy(comm_);
    }
    if (staging_) cudaFree(staging_);
  }

  Backend backend() const override { return Backend::nccl; }

  void abort(const std::string& reason) override {
    {
      std::lock_guard lock(abort_mutex_);
      if (abort_reason_.empty()) abort_reason_ = reason;
    }
    aborted_.store(true);
    bootstrap_->abort(reason);
  }

 protected:
  Status do_all_reduce(std::span<float> data) override {
    if (!on_device(data.data())) return bootstrap_->all_reduce(data);
    return enqueue_and_wait([&] {
      return ncclAllReduce(data.data(), data.data(), data.size(), ncclFloat, ncclSum, comm_, stream_);
    });
  }

  Status do_all_gather(std::span<const std::byte> in, std::span<std::byte> out,
                       std::span<const size_t> byte_counts) override {
    if (!on_device(out.data())) return bootstrap_->all_gather_bytes(in, out, byte_counts);
    // Uneven parts: each rank's part broadcast from it, in one NCCL group call.
    return enqueue_and_wait([&] {
      ncclGroupStart();
      size_t offset = 0;
      for (int r = 0; r < size(); ++r) {
        const size_t n = byte_counts[static_cast<size_t>(r)];
        const void* send = r == rank() ? static_cast<const void*>(in.data()) : static_cast<const void*>(out.data() + offset);
        if (n > 0) ncclBroadcast(send, out.data() + offset, n, ncclChar, r, comm_, stream_);
        offset += n;
      }
      return ncclGroupEnd();
    });
  }

  Status do_reduce_scatter(std::span<const float> in, std::span<float> out, std::span<const size_t> counts) override {
    if (!on_device(in.data())) return bootstrap_->reduce_scatter(in, out, counts);
    // Uneven parts: each rank's part reduced to it, in one NCCL group call.
    return enqueue_and_wait([&] {
      ncclGroupStart();
      size_t offset = 0;
      for (int r = 0; r < size(); ++r) {
        const size_t n = counts[static_cast<size_t>(r)];
        // A non-root's receive buffer is never written; it is given a valid device pointer all the same.
        float* recv = r == rank() ? out.data() : const_cast<float*>(in.data());
        if (n > 0) ncclReduce(in.data() + offset, recv, n, ncclFloat, ncclSum, r, comm_, stream_);
        offset += n;
      }
      return ncclGroupEnd();
    });
  }

  Status do_all_to_all(std::span<const std::byte> in, std::span<const size_t> send_bytes, Sink& sink) override {
    // The counts travel through the CPU group (they decide the receive sizes), each with whether its sender's blocks
    // are in device memory (a rank that sends nothing cannot tell from its empty span: any peer's device memory
    // puts every rank on NCCL); the blocks through NCCL then, else through the CPU group. What arrives is placed
    // where the sink says (host memory).
    const size_t mine_on_device = on_device(in.data()) ? 1 : 0;
    std::vector<size_t> header(2 * static_cast<size_t>(size()));  // per peer: the bytes it gets, then the flag
    for (size_t r = 0; r < send_bytes.size(); ++r) header[2 * r] = send_bytes[r], header[2 * r + 1] = mine_on_device;
    const std::vector<size_t> per_peer(static_cast<size_t>(size()), 2 * sizeof(size_t));
    std::vector<std::byte> headers_out;
    std::vector<size_t> received;
    ACTORD_TRY_STATUS(bootstrap_->all_to_all_bytes(std::as_bytes(std::span(header)), per_peer, headers_out, received));
    std::vector<size_t> got(header.size());
    std::memcpy(got.data(), headers_out.data(), got.size() * sizeof(size_t));
    std::vector<size_t> recv_bytes(static_cast<size_t>(size()));
    bool device = false;
    for (size_t r = 0; r < recv_bytes.size(); ++r) {
      recv_bytes[r] = got[2 * r];
      device = device || got[2 * r + 1] != 0;
    }
    auto placed = place(sink, recv_bytes);
    if (!placed) return placed.error();
    size_t total = 0;
    for (size_t b : recv_bytes) total += b;
    if (!device) {
      std::vector<std::byte> out;
      std::vector<size_t> got;
      ACTORD_TRY_STATUS(bootstrap_->all_to_all_bytes(in, send_bytes, out, got));
      std::memcpy(placed->data(), out.data(), out.size());
      return {};
    }
    if (staging_bytes_ < total) {
      if (staging_) cudaFree(staging_);
      staging_ = nullptr;
      staging_bytes_ = 0;
      if (cudaMalloc(&staging_, total) != cudaSuccess) {
        cudaGetLastError();
        return make_error(Errc::out_of_memory, "no device memory for " + std::to_string(total) + " bytes");
      }
      staging_bytes_ = total;
    }
    ACTORD_TRY_STATUS(enqueue_and_wait([&] {
      ncclGroupStart();
      size_t send_at = 0, recv_at = 0;
      for (int r = 0; r < size(); ++r) {
        const size_t s = send_bytes[static_cast<size_t>(r)], n = recv_bytes[static_cast<size_t>(r)];
        if (s > 0) ncclSend(in.data() + send_at, s, ncclChar, r, comm_, stream_);
        if (n > 0) ncclRecv(static_cast<std::byte*>(staging_) + recv_at, n, ncclChar, r, comm_, stream_);
        send_at += s;
        recv_at += n;
      }
      return ncclGroupEnd();
    }));
    if (total > 0 && cudaMemcpy(placed->data(), staging_, total, cudaMemcpyDeviceToHost) != cudaSuccess) {
      return make_error(Errc::worker_failed, std::string("copy of the received blocks: ") +
                                                 cudaGetErrorString(cudaGetLastError()));
    }
    return {};
  }

  Status do_send(int peer, std::span<const std::byte> data) override {
    if (!on_device(data.data())) return bootstrap_->send_bytes(peer, data);
    return enqueue_and_wait([&] { return ncclSend(data.data(), data.size(), ncclChar, peer, comm_, stream_); });
  }

  Status do_recv(int peer, std::span<std::byte> out) override {
    if (!on_device(out.data())) return bootstrap_->recv_bytes(peer, out);
    return enqueue_and_wait([&] { return ncclRecv(out.data(), out.size(), ncclChar, peer, comm_, stream_); });
  }

  Status do_barrier() override { return bootstrap_->barrier(); }

 private:
  static GroupSpec with_backend(GroupSpec spec) {
    spec.backend = Backend::nccl;
    return spec;
  }

  // Queues an NCCL call on the stream and waits for the stream, at most the group's timeout, watching NCCL's
  // asynchronous errors and abort(); a failure aborts the NCCL communicator (the group is broken for good).
  template <class Call>
  Status enqueue_and_wait(Call&& call) {
    if (!comm_) return make_error(Errc::worker_failed, "the NCCL communicator was aborted");
    cudaSetDevice(device_);
    const ncclResult_t queued = call();
    if (queued != ncclSuccess && queued != ncclInProgress) return fail(ncclGetErrorString(queued));
    const auto deadline = std::chrono::steady_clock::now() + spec().timeout;
    for (;;) {
      const cudaError_t done = cudaStreamQuery(stream_);
      if (done == cudaSuccess) return {};
      if (done != cudaErrorNotReady) return fail(std::string("CUDA: ") + cudaGetErrorString(done));
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(comm_, &async);
      if (async != ncclSuccess && async != ncclInProgress) return fail(ncclGetErrorString(async));
      if (aborted_.load()) {
        std::lock_guard lock(abort_mutex_);
        return fail("aborted: " + abort_reason_);
      }
      if (std::chrono::steady_clock::now() > deadline) {
        return fail("a peer did not take part within " + std::to_string(spec().timeout.count()) + " ms");
      }
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }

  Status fail(const std::string& why) {
    if (comm_) {
      ncclCommAbort(comm_);
      comm_ = nullptr;
    }
    return make_error(Errc::worker_failed, "NCCL: " + why);
  }

  std::unique_ptr<Communicator> bootstrap_;
  ncclComm_t comm_;
  int device_;
  cudaStream_t stream_;
  void* staging_ = nullptr;  // all_to_all's receive blocks on the device
  size_t staging_bytes_ = 0;
  std::atomic<bool> aborted_{false};
  std::mutex abort_mutex_;
  std::string abort_reason_;
};

}  // namespace

Result<std::unique_ptr<Communicator>> join_nccl_group(std::unique_ptr<Communicator> bootstrap, int device,
                                                      void* stream) {
  if (!bootstrap) return make_error(Errc::invalid_argument, "join_nccl_group: no bootstrap group");
  const std::string who = describe(bootstrap->spec()) + ", rank " + std::to_string(bootstrap->rank());
  if (cudaSetDevice(device) != cudaSuccess) {
    return make_error(Errc::unsupported, who + ": CUDA device " + std::to_string(device) + ": " +
                                             cudaGetErrorString(cudaGetLastError()));
  }
  ncclUniqueId id{};
  if (bootstrap->rank() == 0) {
    if (const ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess) {
      return make_error(Errc::worker_failed, who + ": ncclGetUniqueId: " + ncclGetErrorString(r));
    }
  }
  // Every rank's 128 bytes gathered; rank 0's are the id.
  const size_t n = sizeof(id);
  std::vector<std::byte> all(n * static_cast<size_t>(bootstrap->size()));
  std::vector<size_t> counts(static_cast<size_t>(bootstrap->size()), n);
  ACTORD_TRY_STATUS(bootstrap->all_gather_bytes(std::as_bytes(std::span(&id, 1)), all, counts));
  std::memcpy(&id, all.data(), n);
  ncclComm_t comm = nullptr;
  if (const ncclResult_t r = ncclCommInitRank(&comm, bootstrap->size(), id, bootstrap->rank()); r != ncclSuccess) {
    return make_error(Errc::worker_failed, who + ": ncclCommInitRank: " + ncclGetErrorString(r));
  }
  return std::unique_ptr<Communicator>(
      new NcclCommunicator(std::move(bootstrap), comm, device, static_cast<cudaStream_t>(stream)));
}

}  // namespace actord::coll
