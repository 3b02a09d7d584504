// comms' envelope decoding (comms/zmq_link: recv_envelope, comms/capnp_codec: WireReader, get_error, codecs): the
// multipart ZeroMQ messages a worker process reads, sent over an inproc PAIR socket.
// Input: frames, each its length (2 bytes, little endian) then its bytes; the first frame is the envelope, the
// second the body, the rest bulk frames.
// Properties: recv_envelope never throws or crashes: a malformed envelope is an Error; the body of a received
// envelope, read as the message its kind names (as the worker process and the engine read them), either reads or
// throws kj::Exception.
#include <zmq.hpp>

#include "comms/capnp_codec.hpp"
#include "comms/codecs.hpp"
#include "comms/zmq_link.hpp"
#include "fuzz_util.hpp"

using namespace actord;

namespace {

struct Link {
  zmq::context_t context{1};
  zmq::socket_t in{context, zmq::socket_type::pair};
  zmq::socket_t out{context, zmq::socket_type::pair};
  Link() {
    in.bind("inproc://actord-envelope-fuzz");
    out.connect("inproc://actord-envelope-fuzz");
  }
};

// Reads the body as the message of its kind, touching the fields its readers use.
void read_body(const Envelope& env) {
  WireReader reader(env.body);
  switch (env.kind) {
    case wire::MessageKind::WORKER_INIT: {
      auto m = reader.root<wire::WorkerInit>();
      (void)string_of(m.getName());
      (void)string_of(m.getModelPath());
      for (auto p : m.getPlugins()) (void)string_of(p);
      break;
    }
    case wire::MessageKind::WORKER_READY: (void)get_error(reader.root<wire::WorkerReady>().getError()); break;
    case wire::MessageKind::EXECUTE_STEP:
      for (auto s : reader.root<wire::ExecuteStep>().getSeqs()) {
        (void)from_wire(s.getSampling());
        (void)to_vector<int32_t>(s.getTokenIds());
        (void)to_vector<uint32_t>(s.getBlockTable());
      }
      break;
    case wire::MessageKind::STEP_RESULT: {
      auto r = reader.root<wire::StepResult>();
      for (auto s : r.getResults()) (void)from_wire(s.getLogprobs());
      for (auto p : r.getPromptLogprobs())
        for (auto e : p.getEntries()) (void)from_wire(e);
      (void)get_error(r.getError());
      break;
    }
    case wire::MessageKind::KV_EXPORT: (void)string_of(reader.root<wire::KvExport>().getLayout().getDtype()); break;
    case wire::MessageKind::IMPORT_KV:
      (void)to_vector<uint32_t>(reader.root<wire::ImportKv>().getBlockIds());
      (void)get_error(reader.root<wire::ImportKv>().getExport().getError());
      break;
    default: (void)from_wire(reader.root<wire::SchedulerStats>()); break;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Link link;
  std::vector<std::vector<uint8_t>> frames;
  for (size_t i = 0; i < size && frames.size() < 16;) {
    size_t n = data[i++];
    if (i < size) n |= static_cast<size_t>(data[i++]) << 8;
    n = std::min(n, size - i);
    frames.emplace_back(data + i, data + i + n);
    i += n;
  }
  if (frames.empty()) return 0;
  for (size_t f = 0; f < frames.size(); ++f)
    link.out.send(zmq::buffer(frames[f]), f + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
  auto got = recv_envelope(link.in, 1000);
  if (!got) {
    fuzz::require(!got.error().message.empty(), "an error without a message");
    return 0;
  }
  fuzz::require(got->has_value(), "a sent message was not received");
  try {
    read_body(**got);
  } catch (const kj::Exception&) {
  }
  return 0;
}
