// The one conversion between each plain C++ struct that crosses actors and its capnp twin. Every sender and
// receiver uses these, so a new field is one line in the C++ struct and one in the schema (and one here).
// Include only from .cpp files: it pulls in capnp.
#pragma once

#include "comms/capnp_codec.hpp"
#include "core/sampling_options.hpp"
#include "core/scheduler_stats.hpp"

namespace actord {

void to_wire(const SamplingOptions& in, wire::SamplingParams::Builder out);
SamplingOptions from_wire(wire::SamplingParams::Reader in);

void to_wire(const TokenLogprobs& in, wire::TokenLogprobs::Builder out);
TokenLogprobs from_wire(wire::TokenLogprobs::Reader in);

void to_wire(const SchedulerStats& in, wire::SchedulerStats::Builder out);
SchedulerStats from_wire(wire::SchedulerStats::Reader in);
// A StatsRequest (answered with a SchedulerStats) carrying `correlation_id`.
wire_msg stats_request(uint64_t correlation_id);

}  // namespace actord
