// How `generate` and `bench offline` end on a signal: SIGINT, SIGTERM and SIGHUP still end the process as they
// would by default (killed by that signal), but first a thread of their own unlinks the names of the process's
// shared memory segments (worker links and collective groups, comms/collectives/shm_segment.hpp) that are still
// there, which the engine's destructors would have done; worker processes die with it (PR_SET_PDEATHSIG). SIGPIPE is ignored: a closed stdout fails the write instead of killing the process.
//
// Contract: call once, from main, before any thread is started (the signal mask is inherited).
#pragma once

namespace actord::cli {

void end_on_signals_after_cleanup();

}  // namespace actord::cli
