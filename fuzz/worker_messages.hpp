// The record format of worker_fuzz's inputs, shared with the seed writer (make_seeds.cpp).
// An input is a series of records: kind (1 byte: 0 ExecuteStep, 1 ExportKv, 2 ImportKv, mod 3), the message's
// length (2 bytes, little endian) and its bytes (a flat capnp message), then for ImportKv the bulk frame's length
// (2 bytes) and its bytes. A record cut short by the end of the input is cut there.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "comms/wire_msg.hpp"

namespace actord::fuzz {

enum class WorkerCall : uint8_t { execute = 0, export_kv = 1, import_kv = 2 };

struct WorkerRecord {
  WorkerCall call = WorkerCall::execute;
  wire_msg msg;
};

inline std::vector<WorkerRecord> read_records(const uint8_t* data, size_t size) {
  std::vector<WorkerRecord> out;
  size_t i = 0;
  auto take = [&](std::vector<uint8_t>& into) {
    size_t n = 0;
    if (i < size) n |= data[i++];
    if (i < size) n |= static_cast<size_t>(data[i++]) << 8;
    n = std::min(n, size - i);
    into.assign(data + i, data + i + n);
    i += n;
  };
  while (i < size) {
    WorkerRecord r;
    r.call = static_cast<WorkerCall>(data[i++] % 3);
    take(r.msg.bytes);
    if (r.call == WorkerCall::import_kv) take(r.msg.bulk.emplace_back());
    out.push_back(std::move(r));
  }
  return out;
}

inline void write_record(std::string& out, WorkerCall call, const wire_msg& msg) {
  auto put = [&](const std::vector<uint8_t>& bytes) {
    out.push_back(static_cast<char>(bytes.size() & 0xff));
    out.push_back(static_cast<char>(bytes.size() >> 8));
    out.append(bytes.begin(), bytes.end());
  };
  out.push_back(static_cast<char>(call));
  put(msg.bytes);
  if (call == WorkerCall::import_kv) put(msg.bulk.empty() ? std::vector<uint8_t>{} : msg.bulk[0]);
}

}  // namespace actord::fuzz
