# Messages exchanged between actord actors, in one process (CAF mailbox) or across processes (ZeroMQ).
#
# Wire rules (DESIGN.md §3): fields are only ever appended, never renumbered or removed; every request carries a
# correlationId that its reply echoes; failures travel as a typed Error. Bulk tensors never go in here: they ride as
# extra ZeroMQ frames referenced by id.
@0xc1f3a8e4d2b7a901;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("actord::wire");

enum ErrorCode {
  none @0;
  invalidArgument @1;
  invalidConfig @2;
  notFound @3;
  unsupported @4;
  parseError @5;
  resourceExhausted @6;
  workerFailed @7;
  internal @8;
  outOfMemory @9;
}

struct Error {
  code @0 :ErrorCode;
  message @1 :Text;
}

struct SamplingParams {
  temperature @0 :Float32 = 1.0;   # 0 means greedy
  topP @1 :Float32 = 1.0;          # 1 disables nucleus filtering
  topK @2 :Int32 = 0;              # 0 disables top-k filtering
  seed @3 :UInt64;                 # per-request seed; the same seed gives the same tokens whatever the batch
  minP @4 :Float32;                # 0 disables min-p filtering
  repetitionPenalty @5 :Float32 = 1.0;
  frequencyPenalty @6 :Float32;
  presencePenalty @7 :Float32;
  minTokens @8 :UInt32;            # stop ids are masked until this many tokens were generated
  logprobs @9 :Int32 = -1;         # -1: none; 0: the sampled token's; N: and the N best alternatives
  n @10 :UInt32 = 1;               # samples of the prompt; sample i is request id + i and draws with seed + i
  promptLogprobs @11 :Int32 = -1;  # -1: none; 0: each prompt token's logprob (from the second on); N: and the top N
  logitBias @12 :List(LogitBias);  # added to the raw logits first; ids increasing, each once
  responseFormat @13 :ResponseFormat;
  jsonSchema @14 :Text;            # responseFormat jsonSchema: the schema's JSON text
  regex @15 :Text;                 # responseFormat regex: the pattern the whole text matches
  grammar @16 :Text;               # responseFormat grammar: the GBNF grammar the whole text is a sentence of
}

enum ResponseFormat {
  text @0;
  jsonObject @1;                   # one JSON object: tokens that cannot continue it are masked
  jsonSchema @2;                   # one JSON object that SamplingParams.jsonSchema admits
  regex @3;                        # a text that SamplingParams.regex matches whole
  grammar @4;                      # a sentence of SamplingParams.grammar
}

struct LogitBias {
  id @0 :Int32;
  bias @1 :Float32;
}
# (core/sampling_options.hpp is the C++ side; comms/codecs.hpp the one conversion between the two.)

# The raw log-probabilities of one generated token, and of the best alternatives when asked for.
struct TokenLogprobs {
  logprob @0 :Float32;
  topIds @1 :List(Int32);          # best first
  topLogprobs @2 :List(Float32);
}

# tokenizer ------------------------------------------------------------------------------------------------------

struct TokenizeRequest {
  correlationId @0 :UInt64;
  text @1 :Text;
  addSpecialTokens @2 :Bool = true;
}

struct TokenizeResult {
  correlationId @0 :UInt64;
  ids @1 :List(Int32);
  error @2 :Error;
}

# scheduler ------------------------------------------------------------------------------------------------------

# A request's life: client -> tokenizer actor (encodes the prompt, keeps the request's text state) -> scheduler;
# the scheduler's StreamDeltas -> that tokenizer actor (text, stop strings) -> the client. No round trip per token.
struct SubmitRequest {
  correlationId @0 :UInt64;
  requestId @1 :UInt64;          # unique per engine; every StreamDelta of this request carries it (sample i of
                                 # sampling.n: requestId + i)
  promptIds @2 :List(Int32);
  maxTokens @3 :UInt32;
  sampling @4 :SamplingParams;
  stopIds @5 :List(Int32);       # generation ends after emitting one of these (the id is reported, not hidden); the
                                 # tokenizer actor adds the model's end-of-sequence ids
  ignoreEos @6 :Bool;
  priority @7 :Int32;            # for the priority policy: lower runs first
  promptText @8 :Text;           # with tokenizePrompt: the prompt, encoded by the tokenizer actor (BOS added)
  tokenizePrompt @9 :Bool;
  stopStrings @10 :List(Text);   # the tokenizer actor ends generation at the first of these in the text (not emitted)
  # A continuation of a request handed back by a replica that failed or drained (scheduler/batch_scheduler.hpp
  # SequenceRequest::resumed): the tokens it generated there, already reported; never reported again.
  resumeIds @11 :List(Int32);
  promptLogprobsReported @12 :UInt32;  # prompt positions below it had their logprobs reported
  handBacks @13 :UInt32;               # failures it was handed back for in a row without a token generated
                                       # between them (bounded: a request that kills workers fails)
  # A continuation moving with its KV (a reshape, engine.reshape_kv: move): the whole model's KV blocks of its first
  # kv.numTokens positions (gathered from its ranks' shards), the bytes in the message's bulk[0].
  kv @14 :KvExport;
  resumedAtHandBack @15 :UInt32;       # resumeIds' length at the last of those failures
  lora @16 :UInt32;              # 0: the base model; k: the k-th LoRA adapter of the topology's lora.modules
}

struct CancelRequest {
  correlationId @0 :UInt64;
  requestId @1 :UInt64;
}

enum FinishReason {
  none @0;        # still running
  stop @1;        # a stop id was generated
  length @2;      # maxTokens or the model's context reached
  error @3;       # see error
  cancelled @4;
}

# Sent by the scheduler to whoever submitted the request, after every step that produced tokens for it.
struct StreamDelta {
  requestId @0 :UInt64;
  tokenIds @1 :List(Int32);
  finishReason @2 :FinishReason;
  error @3 :Error;
  promptTokens @4 :UInt32;
  logprobs @5 :List(TokenLogprobs);  # one per token of tokenIds when the request asked for logprobs
  promptLogprobs @6 :List(TokenLogprobs);  # prompt positions promptLogprobsFrom.. (prompt logprobs, in order)
  promptLogprobsFrom @7 :UInt32;
  text @8 :Text;                 # set by the tokenizer actor: the text these tokens add (stop strings applied)
  promptIds @9 :List(Int32);     # set by the tokenizer actor in each sample's first delta: the prompt's ids
  queueMicros @10 :UInt64;       # in the first delta after the request was first scheduled: arrival at the
                                 # scheduler -> first step that carried it (0: not in this delta)
}

# What the scheduler sends a submitter after a step: one StreamDelta per request of that submitter that produced
# tokens or finished in the step (one message per submitter per step, not one per request).
struct StreamDeltaBatch {
  deltas @0 :List(StreamDelta);
}

# kv_pool --------------------------------------------------------------------------------------------------------

struct KvLeaseRequest {
  correlationId @0 :UInt64;
  holder @1 :Text;               # stable name of the leaseholder, e.g. replica/0/scheduler
  numBlocks @2 :UInt32;          # up to this many (fewer when the pool has fewer free; 0 = all free blocks)
}

struct KvLeaseGrant {
  correlationId @0 :UInt64;
  blockIds @1 :List(UInt32);
  blockSize @2 :UInt32;
  error @3 :Error;
}

struct KvRelease {
  correlationId @0 :UInt64;
  holder @1 :Text;
  blockIds @2 :List(UInt32);
}

# worker ---------------------------------------------------------------------------------------------------------

# One sequence's slice of a step: feed tokenIds at positions startPos.. ; its KV lives in blockTable.
struct SeqStep {
  seqId @0 :UInt64;
  tokenIds @1 :List(Int32);
  startPos @2 :UInt32;
  blockTable @3 :List(UInt32);   # block i holds positions [i*blockSize, (i+1)*blockSize)
  sample @4 :Bool;               # true when this slice ends the known tokens: sample the next one
  sampling @5 :SamplingParams;
  sampleIndex @6 :UInt32;        # how many tokens this sequence generated before: keys the seeded RNG
  fromPrevious @7 :Int32 = -1;   # >= 0: tokenIds is one placeholder; feed the token this worker sampled at this
                                 # index of the previous step's results (the step was planned before it returned)
  newSequence @8 :Bool;          # first slice since the sequence was admitted: (re)create the worker's state for it
                                 # from sampling, promptLen and stopIds (sent only then); it lasts until `released`
  promptLen @9 :UInt32;          # with newSequence: positions below it are prompt (for the penalties)
  stopIds @10 :List(Int32);      # with newSequence and minTokens > 0 (ids masked until minTokens were generated)
                                 # or a response format (ids it allows once its text is complete)
  appendBlocks @11 :List(UInt32);  # without newSequence: blocks added to the table the worker keeps for it
                                   # (blockTable is then empty: the whole table travels only with newSequence)
  contextTokens @12 :List(Int32);  # with newSequence, startPos > 0 (a cached prefix) and penalties or a response
                                   # format: the tokens before startPos, for the penalty history and the grammar
  promptLogprobsFrom @14 :Int32 = -1;  # >= 0: report the logprob of each prompt token at a position from this one
                                 # that this slice's rows predict (a row at position p predicts p + 1)
  nextPromptToken @15 :Int32 = -1;  # with promptLogprobsFrom: the prompt token after this slice's tokens, if any
  forks @13 :UInt32;             # > 1 (with sample): draw this many tokens from the slice's last row, the i-th with
                                 # the options' for_sample(i); results i > 0 carry seqId + i (the scheduler forks them)
  drafts @16 :UInt32;            # > 0 (with sample; speculative decoding): the last `drafts` tokens are guesses; sample
                                 # each of the slice's last drafts + 1 rows, row j with sample index sampleIndex + j
                                 # (one result each, in order; the scheduler keeps the guesses they confirm)
  lora @17 :UInt32;              # with newSequence: 0, the base model; k: the k-th adapter of WorkerInit.loraModules
}

# A copy of one KV block's bytes (every layer) from one block to another.
struct BlockCopy {
  src @0 :UInt32;
  dst @1 :UInt32;
}

struct ExecuteStep {
  correlationId @0 :UInt64;
  stepId @1 :UInt64;
  seqs @2 :List(SeqStep);
  released @3 :List(UInt64);     # sequences that ended or were preempted: the worker drops its state for them
  # Block copies the worker makes before the forward pass, in this order: copyBlocks, swapOut, swapIn (a fork's
  # copy may be swapped out by the same step; a block freed by a swap-out may be written again by this very step):
  swapOut @4 :List(BlockCopy);   # KV pool block -> host swap block (a sequence preempted by swapping)
  swapIn @5 :List(BlockCopy);    # host swap block -> KV pool block (a swapped sequence admitted again)
  copyBlocks @6 :List(BlockCopy);  # KV pool block -> KV pool block (copy-on-write of a forked sequence's last block)
  # EPLB: a new expert placement, taken before this step's forward pass: for every layer of the model, the logical
  # expert of each slot of the ep group ([layer][slot], ep x slots per rank; dense layers' entries unused).
  expertPlacement @7 :List(Int32);
  # Attention data parallel lanes: the most tokens any lane of the replica runs in this step (each lane gets its
  # own ExecuteStep, an idle one without sequences: it still serves its experts to the others).
  laneTokens @8 :UInt32;
  trace @9 :Bool;                # --trace: the ranks record this step's spans and send them in their results
  # For two-batch overlap with lanes (or AFD): the most tokens any lane's micro-batch k runs, for each k
  # (core/micro_batch_split.hpp cuts each lane's batch).
  laneTokensPerMicroBatch @10 :List(UInt32);
  wholeBatch @11 :Bool;          # ranks with two-batch overlap run this step uncut (groups[].tbo: auto)
}

struct SeqResult {
  seqId @0 :UInt64;
  tokenId @1 :Int32;
  logprobs @2 :TokenLogprobs;    # set when the request asked for logprobs
}

# The logprobs of prompt tokens at positions firstPos, firstPos + 1, ... of one sequence.
struct PromptLogprobs {
  seqId @0 :UInt64;
  firstPos @1 :UInt32;
  entries @2 :List(TokenLogprobs);
}

struct StepResult {
  correlationId @0 :UInt64;
  stepId @1 :UInt64;
  results @2 :List(SeqResult);   # one per SeqStep with sample = true (forks of them with forks > 1), in order
  promptLogprobs @6 :List(PromptLogprobs);  # one per SeqStep with promptLogprobsFrom >= 0 that predicted some
  error @3 :Error;
  computeMicros @4 :UInt64;      # time the worker spent in the forward pass
  idleMicros @5 :UInt64;         # time between the end of the worker's previous step and the start of this one
  commMicros @7 :UInt64;         # of computeMicros: time in collectives (waiting for peer ranks included)
  # MoE models, from tp rank 0 of each stage: tokens routed to each expert in this step, for the stage's layers
  # [expertLayerFirst, + expertTokens.size / numExperts), layer-major (dense layers count none).
  numExperts @8 :UInt32;
  expertLayerFirst @9 :UInt32;
  expertTokens @10 :List(UInt32);
  # --trace (ExecuteStep.trace), from every rank: its name and what it did in this step, on its machine's
  # CLOCK_MONOTONIC (core/step_trace.hpp).
  rank @11 :Text;
  trace @12 :List(TraceSpan);
  clockId @13 :Text;             # with trace: the boot id of the worker's machine, whose CLOCK_MONOTONIC its spans use
  # A step that ran ahead (answered after the next step was queued behind it): how long before this result was sent
  # the worker saw it done. The scheduler books the step's wall time up to then. 0: answered when done.
  answeredLateMicros @14 :UInt64;
}

struct TraceSpan {
  name @0 :Text;
  category @1 :Text;             # compute | comm | sample | idle | step
  startNs @2 :UInt64;
  durNs @3 :UInt64;
  bytes @4 :UInt64;              # comm: bytes moved for this rank
  layer @5 :Int32;               # -1: none
  microBatch @6 :UInt32;         # two-batch overlap: 0 or 1
}

# Sent by the coordinator to a worker (in a thread or a process) before its first step.
struct WorkerInit {
  correlationId @0 :UInt64;
  name @1 :Text;                 # e.g. replica/0/worker/0
  modelPath @2 :Text;
  dtype @3 :Text;
  numKvBlocks @4 :UInt32;
  blockSize @5 :UInt32;
  logLevel @6 :Text;
  loadFormat @7 :Text;           # auto (safetensors) | dummy
  threads @8 :UInt32;            # CPU threads of this worker; 0: one per core
  seed @9 :UInt64;               # for dummy weights
  plugins @10 :List(Text);       # out-of-tree plugin libraries to load before creating the model
  kvDtype @11 :Text;             # element type of the KV cache: F32 | BF16 | F16
  numSwapBlocks @12 :UInt32;     # host blocks for swapped-out KV (engine.swap_space); 0: no swapping
  cpuIsa @13 :Text;              # CPU kernels' instruction set (groups[i].cpu_isa): auto | portable | avx2 | avx512;
                                 # empty: auto. The worker refuses one its CPU lacks.
  # Tensor x pipeline parallel replicas: this rank's place (tp, pp of 0 read as 1) and, for ranks in their own
  # processes, the collective groups it joins (its stage's TP group, its tp rank's pipeline group). Ranks that are
  # threads of the engine get their communicators from the coordinator instead.
  tp @14 :UInt32;
  pp @15 :UInt32;
  tpRank @16 :UInt32;
  ppRank @17 :UInt32;
  tpGroup @18 :CollectiveGroup;
  pipelineGroup @19 :CollectiveGroup;
  device @20 :Text;              # the executor backend: "cpu" (or empty), or "cuda:N" (GPU N of the worker's machine)
  ep @21 :UInt32;                # expert parallel: 0 or 1 (experts split by TP), or tp (whole experts per tp rank),
                                 # or a larger multiple of tp: ep / tp attention data parallel lanes (pp 1)
  numRedundantExperts @22 :UInt32;  # EPLB: extra expert slots per rank (core/expert_placement.hpp)
  lane @23 :UInt32;              # with attention lanes: this rank's lane (its EP rank is lane * tp + tpRank)
  epGroup @24 :CollectiveGroup;  # with attention lanes, for a rank in its own process: every EP rank of the replica
  tbo @25 :Bool;                 # two-batch overlap (groups[].tbo): each step as micro-batches on threads of their own
  # With tbo, for a rank in its own process: the groups of micro-batches 1 .. microBatches - 1 (micro-batch 0 uses
  # tpGroup, pipelineGroup and epGroup).
  microBatchGroups @26 :List(MicroBatchGroups);
  microBatches @27 :UInt32;      # with tbo: how many (groups[].micro_batches; 0: 2)
  afdAttention @28 :UInt32;      # attention-FFN disaggregation: the replica's attention ranks (lanes x tp); 0: none
  afdFfn @29 :UInt32;            # and its FFN ranks (the EP group is the attention ranks, then the FFN ranks)
  ffnRank @30 :Int32 = -1;       # this rank's index among the FFN ranks; -1: an attention rank
  quantization @31 :Text;        # model.quantization: none (or empty) | int8 | int4
  quantizationGroup @32 :UInt32; # input features per scale; 0: per channel (int8) or 32 (int4)
  quantizationZeroPoints @33 :Bool;
  cpus @34 :List(UInt32);        # the CPUs a worker process binds all its threads to (engine.cpu_binding); empty: unbound
  maxModelLen @35 :UInt32;       # the context the engine serves (LongRoPE picks its factors by it); 0: the model's
  loraModules @36 :List(LoraModule);  # LoRA adapters the model serves besides its base (lora.modules), in order
  maxLoraRank @37 :UInt32;       # lora.max_lora_rank
}

struct LoraModule {
  name @0 :Text;
  path @1 :Text;
}

# One micro-batch's collective groups of a rank (size 0: none).
struct MicroBatchGroups {
  tp @0 :CollectiveGroup;
  pipeline @1 :CollectiveGroup;
  ep @2 :CollectiveGroup;
}

# A collective group as comms/collectives/group_spec.hpp's GroupSpec (size 0: no group).
struct CollectiveGroup {
  name @0 :Text;
  id @1 :UInt64;
  size @2 :UInt32;
  backend @3 :Text;              # in_process | shared_memory | zmq
  timeoutMs @4 :UInt32;
  enginePid @5 :Int64;
  endpoints @6 :List(Text);      # zmq
  overNccl @7 :Bool;             # CUDA ranks: device memory goes through NCCL, bootstrapped over this group
  linkLatencyNs @8 :UInt64;      # a link model (groups[].link); 0: none
  linkBytesPerSecond @9 :UInt64; # 0: unlimited
}

struct WorkerReady {
  correlationId @0 :UInt64;
  name @1 :Text;
  error @2 :Error;
  pid @3 :Int32;
}

# The coordinator's view of a data parallel group (Engine::fleet, GET /admin/fleet, actord status).
struct FleetStatus {
  group @0 :Text;
  replicas @1 :List(ReplicaStatus);
  replacements @2 :UInt32;       # replicas rebuilt after losing a rank, since the start
  scaling @3 :Bool;              # a scale or a reshape is being carried out
  change @4 :Text;               # the reshape's current step ("apply step 2/3: replica/5 replaces replica/2")
  routerPrefill @5 :Text;        # the router's policy for requests in their prefill phase ("least_tokens")
  routerDecode @6 :Text;         # and in their decode phase
  autoscale @7 :List(Text);      # each autoscaled group's last look at its load and what it wants
}

struct ReplicaStatus {
  index @0 :UInt32;              # replica/INDEX
  state @1 :Text;                # starting | serving | draining | rebuilding | failed
  incarnation @2 :UInt32;        # 0 at first, one more each time it is rebuilt
  ranks @3 :List(Text);          # rank names, stage-major
  pids @4 :List(Int32);          # of each rank (this process's for thread ranks); 0 until it is ready
  lastFailure @5 :Text;          # why it was last rebuilt
  shape @6 :Text;                # how it is laid out ("tp2 pp1, processes", "afd 1:2, processes")
  nodes @7 :List(Text);          # the node of each rank, "" for the engine's machine
  group @8 :Text;                # its group's name
  role @9 :Text;                 # its group's role: both | prefill | decode
}

# ZeroMQ envelope ------------------------------------------------------------------------------------------------

enum MessageKind {
  workerInit @0;
  workerReady @1;
  executeStep @2;
  stepResult @3;
  shutdown @4;
  exportKv @5;
  kvExport @6;
  importKv @7;
  kvImported @8;
  heartbeat @9;                  # worker process -> engine, empty body, every heartbeat interval
  agentSpawn @10;                # engine -> node agent: AgentSpawn; answered with agentReply
  agentKill @11;                 # engine -> node agent: AgentPid
  agentStatus @12;               # engine -> node agent: AgentPid
  agentFreePort @13;             # engine -> node agent: empty; a free tcp port on the agent's address
  agentReply @14;                # node agent -> engine: AgentReply
}

# A node agent (`actord agent`) starts `actord worker` processes on its machine for an engine elsewhere.
struct AgentSpawn {
  name @0 :Text;
  toWorker @1 :Text;             # tcp:// endpoints the engine bound; the worker connects to them
  fromWorker @2 :Text;
  logLevel @3 :Text;
  heartbeatMs @4 :UInt32;
}

struct AgentPid {
  pid @0 :Int32;
}

struct AgentReply {
  error @0 :Error;
  pid @1 :Int32;                 # agentSpawn: the worker's pid on the agent's machine
  running @2 :Bool;              # agentStatus
  exit @3 :Text;                 # agentStatus of an ended worker: how it ended
  port @4 :UInt32;               # agentFreePort
}

# First frame of every ZeroMQ message between processes; the second frame is the capnp body of `kind`; bulk
# buffers the body refers to follow as further frames.
struct Envelope {
  kind @0 :MessageKind;
  target @1 :Text;               # stable actor name the body is for
}

# statistics -----------------------------------------------------------------------------------------------------

struct StatsRequest {
  correlationId @0 :UInt64;
}

# Totals since the scheduler started. One step is one ExecuteStep -> StepResult round trip (two messages).
struct SchedulerStats {
  correlationId @0 :UInt64;
  steps @1 :UInt64;
  tokens @2 :UInt64;               # tokens fed to the worker (prefill + decode)
  sampledTokens @3 :UInt64;
  roundTripMicros @4 :UInt64;      # ExecuteStep sent -> StepResult received, summed
  workerComputeMicros @5 :UInt64;  # time inside the worker's forward pass and sampling, summed
  schedulerMicros @6 :UInt64;      # the scheduler's own thread CPU time per step (plan, encode, apply, emit), summed
  preemptions @7 :UInt64;
  maxSeqsInStep @8 :UInt32;
  prefillTokens @9 :UInt64;        # prompt tokens fed (and recomputed ones after preemptions)
  prefillMicros @10 :UInt64;       # round trips of steps that carried any prefill tokens
  decodeTokens @11 :UInt64;        # tokens sampled in decode-only steps
  decodeMicros @12 :UInt64;        # round trips of decode-only steps
  stepsPlannedAhead @13 :UInt64;   # steps sent while the previous one was still executing
  workerIdleMicros @14 :UInt64;    # summed gaps between two steps at the worker with nothing queued
  leaseBlocks @15 :UInt64;         # KV blocks the scheduler holds on lease now
  leaseGrows @16 :UInt64;          # grants that grew the lease
  leaseReturns @17 :UInt64;        # surpluses given back to the kv_pool
  prefixQueryBlocks @18 :UInt64;   # full prompt blocks looked up in the prefix cache at admissions
  prefixHitBlocks @19 :UInt64;     # of which were cached (their prefill skipped)
  prefixEvictions @20 :UInt64;     # cached blocks evicted to make room
  prefixCachedBlocks @21 :UInt64;  # blocks in the prefix cache now
  swapOuts @22 :UInt64;            # sequences preempted by swapping their KV to host memory
  swapIns @23 :UInt64;             # swapped sequences brought back
  swappedBlocks @24 :UInt64;       # KV blocks in host swap space now
  schedulerSendMicros @25 :UInt64; # time handing messages to CAF (sends, waking receivers), apart from schedulerMicros
  runningSeqs @26 :UInt64;         # sequences admitted and not finished, now
  waitingSeqs @27 :UInt64;         # sequences waiting for admission (swapped ones included), now
  swappedSeqs @28 :UInt64;         # waiting sequences whose KV is in host swap space, now
  workerCommMicros @29 :UInt64;    # of workerComputeMicros: the driver rank's time in collectives
  numExperts @30 :UInt32;          # MoE models: experts per MoE layer (0: dense, or no step yet)
  expertTokens @31 :List(UInt64);  # [layer * numExperts + expert]: tokens routed to it, summed over steps
  eplbRebalances @32 :UInt64;      # EPLB placements sent to the ranks
  expertPlacement @33 :List(Int32);  # EPLB: the placement the ranks have now ([layer][slot]); empty when off
  kvMovesOut @34 :UInt64;          # sequences sent on with their KV (a reshape, a prefill hand-off)
  kvMovesIn @35 :UInt64;           # continuations that arrived with their KV
  draftTokens @36 :UInt64;         # speculative decoding: draft tokens verified
  acceptedDraftTokens @37 :UInt64; # of which the samples confirmed (kept)
  prefillHandoffs @38 :UInt64;     # prefill/decode disaggregation: prefilled sequences sent on to decode elsewhere
  rebalancedSeqs @39 :UInt64;      # waiting sequences handed back (a scale-up) to be spread over the grown group
  prefillBacklog @40 :UInt64;      # tokens of live sequences still to prefill, now (autoscale.target_prompt_tokens)
}

# KV export / import: a sequence's KV blocks leave one worker's pool and enter another's (prefill/decode
# disaggregation, live migration). The KV bytes ride as ONE bulk frame (wire_msg::bulk[0]), not in capnp: block i of
# the export is bytes [i * blockBytes, (i+1) * blockBytes) of it, every layer of that block in the worker's layout
# [layer][k|v][kv_head][slot][head_dim] of `dtype`.
struct KvLayout {
  numLayers @0 :UInt32;
  numKvHeads @1 :UInt32;
  headDim @2 :UInt32;
  blockSize @3 :UInt32;
  dtype @4 :Text;                # F32 | BF16 | F16
  # The shard these blocks hold: layers [firstLayer, firstLayer + numLayers) and KV heads [firstKvHead, ...) of a
  # model of totalLayers and totalKvHeads (0: numLayers, numKvHeads: the whole model's). memory/kv_relayout.hpp.
  firstLayer @5 :UInt32;
  firstKvHead @6 :UInt32;
  totalLayers @7 :UInt32;
  totalKvHeads @8 :UInt32;
}

struct ExportKv {
  correlationId @0 :UInt64;
  seqId @1 :UInt64;              # a sequence this worker holds (its block table is the worker's)
  numTokens @2 :UInt32;          # positions [0, numTokens) whose KV is exported
}

struct KvExport {
  correlationId @0 :UInt64;
  seqId @1 :UInt64;
  numTokens @2 :UInt32;
  layout @3 :KvLayout;
  blockBytes @4 :UInt64;
  numBlocks @5 :UInt32;          # ceil(numTokens / blockSize) blocks in the bulk frame
  error @6 :Error;
}

# Writes an export's blocks into this worker's pool: block i of the export goes to blockIds[i]. The layout must match.
struct ImportKv {
  correlationId @0 :UInt64;
  export @1 :KvExport;           # its bulk frame travels as this message's bulk[0]
  blockIds @2 :List(UInt32);
}

struct KvImported {
  correlationId @0 :UInt64;
  error @1 :Error;
}

# What the engine resolved on this machine for one group of a topology it reshapes to.
struct ReshapeGroup {
  numKvBlocks @0 :UInt32;        # of each replica lane
  numSwapBlocks @1 :UInt32;
  rankThreads @2 :List(Int32);   # of each rank of a replica, as the plan resolved them
  rankAgents @3 :List(Text);     # placement on nodes: the node agent of every rank (replica-major), "" here
  replicas @4 :UInt32;           # the group's replicas after the apply: the file's, or an autoscaled group's
                                 # count now within its new bounds (0: the file's)
}

# Engine -> coordinator: take the groups' replicas to a new shape (actord apply). The topology as YAML (the
# coordinator parses it as the engine did) and what the engine resolved for each group on this machine.
struct ReshapeRequest {
  topologyYaml @0 :Text;
  source @1 :Text;               # the file it came from (error messages name it)
  # Fields 2-5: one group's sizing, from before `groups`; no longer written nor read.
  numKvBlocks @2 :UInt32;
  numSwapBlocks @3 :UInt32;
  rankThreads @4 :List(Int32);
  rankAgents @5 :List(Text);
  addLora @6 :Bool;              # the coordinator's topology as it is with loraModules appended to lora.modules
                                 # (topologyYaml unused): a LoRA adapter loaded at run time
  loraModules @7 :List(LoraModule);
  groups @8 :List(ReshapeGroup); # each group's, in the topology's order
}
