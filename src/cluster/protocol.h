#pragma once

// The cluster's membership protocol: what the coordinator and the nodes
// (cluster/node.h, cluster/member.h) say to each other beyond the types of
// transport/message.h, and the flags those messages carry. The coordinator
// that serves it is in src/coordinator.

#include <cstdint>

#include "transport/message.h"

namespace strata {

// Coordinator message conventions (beyond transport/message.h):
//   kRegister     payload 0 = the node's endpoint; the reply (sent when every
//                 node registered) has payload 0 = JSON {"<id>": endpoint}.
//   kHeartbeat    every heartbeat interval; payload 0 (optional) = the
//                 node's live counters as JSON (CoordinatorOptions::on_status).
//   kBarrier      clock = barrier number; the reply comes when every live
//                 worker reached it.
//   kClock        clock = iterations the worker completed; the reply is the
//                 permission to start the next one (bounded staleness).
//   kShutdown     worker -> coordinator: "my iterations are done"; payload 0
//                 (optional) = the worker's metrics as JSON.
//                 coordinator -> node: stop; flags kShutdownError with
//                 payload 0 = the reason.
inline constexpr uint32_t kShutdownError = 1u << 0;
// kShutdown to a worker with this flag: stop training at the next step (the
// run is being ended early, without an error); the node stays up until the
// end of the run (a decentralized worker still serves its model to the
// final evaluation).
inline constexpr uint32_t kShutdownStopTraining = 1u << 1;
// kShutdown from a worker ("done") with this flag: it leaves right after and
// waits for no stop; the coordinator sends it none (a message to a node that
// closed its sockets would hold the coordinator's own close for the
// transport's linger time).
inline constexpr uint32_t kShutdownLeaving = 1u << 2;
// kRegister with this flag (second phase): "I have connected to every peer";
// the reply comes when every node said so, so no node sends to a peer that
// cannot answer yet.
inline constexpr uint32_t kRegisterConnected = 1u << 0;
// kRegister may carry, as payload 1, the run facts a node knows (JSON: the
// parameter count, the iteration budget); the cluster map in the reply
// holds them under this key, next to the node ids.
inline constexpr const char* kRunFactsKey = "run";
// kNodeLost     one-way notice to the data servers: node header.clock was
//               declared lost.

// Checkpoint rounds (docs/design/checkpoints.md; what a checkpoint holds is
// decided by the coordinator role, CoordinatorOptions::on_checkpoint):
//   kCheckpointArrive  worker -> coordinator at a step boundary: clock = the
//                      steps it has done; payloads = its state (opaque
//                      here). Flag kCheckpointFinal: its last step. The reply
//                      comes when the round is over: kAck with clock = the
//                      round, flag kCheckpointStop when the worker is to stop
//                      training there; or, in lockstep modes when others are
//                      ahead, flag kCheckpointCatchUp with clock = the step to
//                      train to and arrive at again (a worker that was
//                      asked, flag kCheckpointPaused, at step s makes the
//                      round's step s + 1: a peer may be inside step s,
//                      waiting for it). Flag kCheckpointFailed
//                      (payload 0 = why): no checkpoint was written; the
//                      worker goes on.
//   kCheckpointPause   coordinator -> worker, one-way: clock = the round;
//                      arrive at the next step boundary.
//   kRestoreRequest    node -> coordinator after it joined: the reply holds
//                      the node's state from the checkpoint the run resumes
//                      from (clock = its step), or no payloads.
inline constexpr uint32_t kCheckpointFinal = 1u << 0;
inline constexpr uint32_t kCheckpointStop = 1u << 1;
inline constexpr uint32_t kCheckpointCatchUp = 1u << 2;
inline constexpr uint32_t kCheckpointFailed = 1u << 3;
// kCheckpointArrive with this flag: the worker came because it was asked
// (kCheckpointPause), not at a step of its own schedule.
inline constexpr uint32_t kCheckpointPaused = 1u << 4;

// kNodeRejoined  coordinator -> every other node, one-way, when a restarted
// node re-joined (CoordinatorOptions::server_restart_timeout): clock = its
// node id, payload 0 = its new endpoint. A node connects to it there and
// sends again the requests it was still waiting on (RpcEndpoint::Resend).

}  // namespace strata
