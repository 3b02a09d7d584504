// Atoms that tag actord messages: each message is (atom, wire_msg) where the atom says which capnp struct the
// bytes hold. Light header (caf/atom.hpp only).
#pragma once

#include <caf/atom.hpp>

namespace actord {

using tokenize_atom = caf::atom_constant<caf::atom("tokenize")>;      // TokenizeRequest -> TokenizeResult
using submit_atom = caf::atom_constant<caf::atom("submit")>;          // SubmitRequest; StreamDeltas follow
using cancel_atom = caf::atom_constant<caf::atom("cancel")>;          // CancelRequest
using delta_atom = caf::atom_constant<caf::atom("delta")>;            // StreamDeltaBatch, scheduler -> submitter
using route_atom = caf::atom_constant<caf::atom("route")>;            // (route, scheduler actor) -> bool: where a
                                                                      // tokenizer actor submits requests
using lease_atom = caf::atom_constant<caf::atom("lease")>;            // KvLeaseRequest -> KvLeaseGrant
using release_atom = caf::atom_constant<caf::atom("release")>;        // KvRelease
using init_atom = caf::atom_constant<caf::atom("init")>;              // WorkerInit -> WorkerReady
using step_atom = caf::atom_constant<caf::atom("step")>;              // ExecuteStep -> StepResult
using export_kv_atom = caf::atom_constant<caf::atom("exportkv")>;     // ExportKv -> KvExport (+ bulk KV bytes)
using import_kv_atom = caf::atom_constant<caf::atom("importkv")>;     // ImportKv (+ bulk KV bytes) -> KvImported
using inbound_atom = caf::atom_constant<caf::atom("inbound")>;        // (kind, wire_msg) from a ZeroMQ link
using link_down_atom = caf::atom_constant<caf::atom("linkdown")>;     // a remote worker process died
using start_atom = caf::atom_constant<caf::atom("start")>;            // coordinator: bring the topology up
using stats_atom = caf::atom_constant<caf::atom("stats")>;            // StatsRequest -> SchedulerStats
using stop_atom = caf::atom_constant<caf::atom("stop")>;              // coordinator: take it down
using deadline_atom = caf::atom_constant<caf::atom("deadline")>;      // scheduler to itself: check step deadlines
using requeue_atom = caf::atom_constant<caf::atom("requeue")>;        // (requeue, owner actor, SubmitRequest):
                                                                      // a continuation handed back to the router
using join_atom = caf::atom_constant<caf::atom("join")>;              // (join, replica id, scheduler): the router
                                                                      // routes to it from now on
using leave_atom = caf::atom_constant<caf::atom("leave")>;            // (leave, scheduler): no new requests to it
using load_atom = caf::atom_constant<caf::atom("load")>;              // (load, uint64 tokens): a scheduler's
                                                                      // outstanding tokens, to the router
using drain_atom = caf::atom_constant<caf::atom("drain")>;            // scheduler: hand back what waits, finish
                                                                      // what runs, then answer
using lost_atom = caf::atom_constant<caf::atom("lost")>;              // scheduler: its ranks are gone; hand back
                                                                      // every sequence, then answer
using scale_atom = caf::atom_constant<caf::atom("scale")>;            // coordinator: (scale, group, replicas)
using fleet_atom = caf::atom_constant<caf::atom("fleet")>;            // coordinator: the replicas and their state
using rebuild_atom = caf::atom_constant<caf::atom("rebuild")>;        // coordinator to itself: retry a rebuild
using reshape_atom = caf::atom_constant<caf::atom("reshape")>;        // coordinator: ReshapeRequest -> (errc, message)
using migrate_atom = caf::atom_constant<caf::atom("migrate")>;        // scheduler: hand every sequence back (running
                                                                      // ones with their tokens so far), then answer
using policy_atom = caf::atom_constant<caf::atom("policy")>;          // router: (policy, prefill, decode) RoutePolicy
                                                                      // of each phase from now on (actord apply)
using autoscale_atom = caf::atom_constant<caf::atom("autoscale")>;    // coordinator to itself: look at the
                                                                      // autoscaled groups' load
using rebalance_atom = caf::atom_constant<caf::atom("rebalance")>;    // scheduler: a replica joined its group; hand
                                                                      // back the sequences it has not started
using pending_atom = caf::atom_constant<caf::atom("pending")>;        // worker to itself: answer its pending step
                                                                      // once the device has done it

}  // namespace actord
