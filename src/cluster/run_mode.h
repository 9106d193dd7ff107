#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace strata {

// The scheduling mode of a run (cluster.mode), parsed once at the config
// layer; everything below dispatches on this type or on the strategies it
// selects, never on the mode's name.
enum class RunMode {
  kLocal,      // single-process trainer
  kSync,       // parameter server, BSP
  kAsync,      // parameter server, ASP
  kSsp,        // parameter server, bounded staleness
  kEasgd,      // elastic averaging with the servers' centre variable
  kAllReduce,  // gradients all-reduced among the workers (Gloo), no servers
  kRing,  // paper 003: reduce-scatter, update of the owned slice, all-gather
  kLocalSgd,   // model averaging every cluster.average_every steps
  kDpsgd,      // average with the topology's neighbours every step
  kGossip,     // GoSGD: push half the weight to a random peer with prob. p
  kTreeEasgd,  // TreeEASGD: elastic exchange up and down a tree of workers
};

// How a mode's workers exchange a step's result; one strategy per family
// (exchange/exchange.h).
enum class ExchangeFamily {
  kNone,        // local
  kPushPull,    // sync, async, ssp
  kElastic,     // easgd
  kCollective,  // allreduce, ring, local-sgd
  kNeighbour,   // dpsgd
  kGossip,      // gossip
  kTree,        // tree-easgd
};

// Parses a cluster.mode value; InvalidArgument lists the known modes.
Result<RunMode> ParseRunMode(const std::string& name);
// The config spelling ("local-sgd").
const char* RunModeName(RunMode mode);
// Every mode's config spelling, in declaration order.
std::vector<std::string> RunModeNames();

ExchangeFamily FamilyOf(RunMode mode);
// True for the modes whose workers talk to parameter servers.
bool UsesServers(RunMode mode);
// True for the modes without a global store (the evaluator averages the
// workers' models).
bool IsDecentralized(RunMode mode);
// True when a lost worker must stop the run (every collective needs all).
bool WorkerLossFatal(RunMode mode);
// True for the modes whose workers move in lockstep (sync, the
// collectives and dpsgd): a checkpoint finds them all at one step, and a
// lost node
// restarts the whole cluster rather than being replaced in place.
bool Lockstep(RunMode mode);

}  // namespace strata
