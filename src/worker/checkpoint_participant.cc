#include "worker/checkpoint_participant.h"

#include <algorithm>
#include <map>
#include <mutex>

#include "cluster/protocol.h"
#include "common/log.h"
#include "common/safetensors.h"

namespace strata {
namespace {

// The state's payloads: its JSON, and the tensors as safetensors.
Result<std::vector<Buffer>> EncodeWorkerState(const nlohmann::json& state,
                                              const float* params, int64_t size,
                                              const ExchangeState& exchange) {
  std::vector<SafeTensor> tensors;
  if (params != nullptr)
    tensors.push_back(SafeTensor::Floats("params", {size}, params));
  std::map<std::string, std::string> metadata;
  if (exchange.has_optimizer) {
    for (const auto& [name, values] : exchange.optimizer.buffers) {
      tensors.push_back(SafeTensor::Floats(
          "optimizer/" + name, {static_cast<int64_t>(values.size())},
          values.data()));
    }
    metadata["optimizer_steps"] = std::to_string(exchange.optimizer.steps);
  }
  for (const auto& [name, values] : exchange.buffers) {
    tensors.push_back(SafeTensor::Floats("exchange/" + name,
                                         {static_cast<int64_t>(values.size())},
                                         values.data()));
  }
  for (const auto& [name, value] : exchange.text)
    metadata["exchange/" + name] = value;
  ASSIGN_OR_RETURN(std::string bytes, EncodeSafetensors(tensors, metadata));
  const std::string text = state.dump();
  std::vector<Buffer> out;
  out.push_back(Buffer::CopyOf(text.data(), text.size()));
  out.push_back(Buffer::CopyOf(bytes.data(), bytes.size()));
  return out;
}

// The strategy's state as a safetensors file holds it.
ExchangeState DecodeExchangeState(const SafetensorsFile& file) {
  ExchangeState es;
  for (const SafeTensor& t : file.tensors) {
    if (t.name.rfind("optimizer/", 0) == 0) {
      es.has_optimizer = true;
      es.optimizer.buffers[t.name.substr(10)] = t.ToFloats();
    } else if (t.name.rfind("exchange/", 0) == 0) {
      es.buffers[t.name.substr(9)] = t.ToFloats();
    }
  }
  for (const auto& [name, value] : file.metadata) {
    if (name.rfind("exchange/", 0) == 0) es.text[name.substr(9)] = value;
  }
  auto steps = file.metadata.find("optimizer_steps");
  if (steps != file.metadata.end())
    es.optimizer.steps = std::stoll(steps->second);
  return es;
}

}  // namespace

Status CheckpointParticipant::RestoreModel(Exchange& exchange,
                                           const ModelBuffers& model,
                                           bool keeps_model) {
  if (checkpoints_ == nullptr || checkpoints_->restore.payloads.size() != 2)
    return Status::Ok();
  const std::vector<Buffer>& payloads = checkpoints_->restore.payloads;
  const std::string what = fmt::format("worker {} state", index_);
  resumed_ = nlohmann::json::parse(payloads[0].ToString(), nullptr,
                                   /*allow_exceptions=*/false);
  if (!resumed_.is_object() ||
      !resumed_.value("step", nlohmann::json()).is_number_integer()) {
    return Status::DataLoss("{}: bad JSON", what);
  }
  ASSIGN_OR_RETURN(SafetensorsFile file,
                   DecodeSafetensors(payloads[1].ToString(), what));
  if (keeps_model) {
    const SafeTensor* p = file.Find("params");
    if (p == nullptr || p->numel() != model.size) {
      return Status::DataLoss("{}: no \"params\" of {} floats", what,
                              model.size);
    }
    const std::vector<float> values = p->ToFloats();
    std::copy(values.begin(), values.end(), model.params);
  }
  Status restored = exchange.RestoreState(DecodeExchangeState(file));
  if (!restored.ok())
    return Status::DataLoss("{}: {}", what, restored.message());
  return Status::Ok();
}

Result<int64_t> CheckpointParticipant::RestoreParts(
    const CheckpointedParts& parts) {
  if (resumed_.is_null()) return int64_t{0};
  const int64_t first_step = resumed_["step"].get<int64_t>();
  RETURN_IF_ERROR(parts.source.RestoreState(resumed_));
  parts.faults.RestoreState(resumed_.value("delay_rng", ""));
  parts.metrics.RestoreCounters(
      resumed_.value("counters", nlohmann::json::object()));
  parts.metrics.replan_examples = parts.source.replan_examples();
  parts.metrics.replan_tv = parts.source.replan_tv();
  parts.published.Publish(parts.model.params, parts.model.size, first_step);
  LogInfo("worker {}: resumed at step {}", index_, first_step);
  return first_step;
}

Status CheckpointParticipant::AfterStep(int64_t done, int64_t total,
                                        const CheckpointedParts& parts) {
  if (checkpoints_ == nullptr || done >= total) return Status::Ok();
  const bool scheduled = checkpoints_->every_updates > 0 &&
                         done % checkpoints_->every_updates == 0;
  const bool asked = checkpoints_->pause_round.load() > rounds_done_;
  if (catch_up_to_ >= 0 ? done != catch_up_to_ : !(scheduled || asked))
    return Status::Ok();
  return Arrive(done, /*final=*/false,
                /*paused=*/catch_up_to_ < 0 && !scheduled, parts);
}

Status CheckpointParticipant::AtEnd(bool trained_to_the_end, int64_t first_step,
                                    const CheckpointedParts& parts) {
  const int64_t steps = parts.metrics.iterations;
  if (checkpoints_ == nullptr || stop_.after_round() || !trained_to_the_end ||
      steps <= first_step)
    return Status::Ok();
  // Nobody waits for this worker's gradients from here on
  // (Exchange::Depart).
  RETURN_IF_ERROR(parts.exchange.Depart(steps));
  return Arrive(steps, /*final=*/true, /*paused=*/false, parts);
}

Status CheckpointParticipant::Arrive(int64_t done, bool final, bool paused,
                                     const CheckpointedParts& parts) {
  // The data server's cursor must know every batch trained so far.
  RETURN_IF_ERROR(parts.source.BeforeCheckpoint());
  RETURN_IF_ERROR(parts.exchange.Quiesce(done));
  if (!final) RETURN_IF_ERROR(parts.exchange.PauseForRound(done));
  ASSIGN_OR_RETURN(ExchangeState es, parts.exchange.SaveState());
  nlohmann::json state{{"step", done},
                       {"worker", index_},
                       {"counters", parts.metrics.SaveAll()},
                       {"delay_rng", parts.faults.SaveState()}};
  parts.source.SaveState(state);
  Message msg;
  msg.header.type = MessageType::kCheckpointArrive;
  msg.header.clock = done;
  if (final) msg.header.flags |= kCheckpointFinal;
  if (paused) msg.header.flags |= kCheckpointPaused;
  {
    MutexLock lock(&parts.published.mu);
    ASSIGN_OR_RETURN(
        msg.payloads,
        EncodeWorkerState(state,
                          parts.keeps_model ? parts.model.params : nullptr,
                          parts.model.size, es));
  }
  auto reply = rpc_.Request(o_.roles.CoordinatorId(), std::move(msg))
                   ->Wait(o_.request_timeout);
  if (!reply.ok()) {
    return reply.status().WithContext(
        fmt::format("worker {}: checkpoint at step {}", index_, done));
  }
  if (reply->header.flags & kCheckpointFailed) {
    // The coordinator could not write it; training goes on.
    LogWarning("worker {}: no checkpoint at step {}: {}", index_, done,
               reply->payloads.empty() ? "" : reply->payloads[0].ToString());
  }
  if (reply->header.flags & kCheckpointCatchUp) {
    catch_up_to_ = reply->header.clock;
    return parts.exchange.ResumeAfterRound();
  }
  catch_up_to_ = -1;
  rounds_done_ = reply->header.clock;
  if (reply->header.flags & kCheckpointStop) {
    stop_.StopAfterRound();  // the run ends here: no need to rejoin
    return Status::Ok();
  }
  return parts.exchange.ResumeAfterRound();  // nothing unless it paused
}

}  // namespace strata
