// A request through its hooks: preprocess, the split into pieces for the workers, the
// join of their answers and postprocess.
#include <pthread.h>
#include <spdlog/spdlog.h>
#include <time.h>

#include <algorithm>
#include <cstring>
#include <unordered_set>

#include "common/clock.h"
#include "hookhost/hookhost_impl.h"
#include "hookhost/request_checks.h"
#include "shm/recovery.h"

namespace ferry::hookhost {

std::optional<AllocatedTensor> HookHost::Impl::AllocateTensor(DType dtype, const Shape& shape) {
  std::optional<uint64_t> bytes = TensorByteSize(dtype, shape);
  if (!bytes) {
    return std::nullopt;
  }
  return AllocateBlock(dtype, shape, *bytes);
}

std::optional<AllocatedTensor> HookHost::Impl::AllocateBlock(DType dtype, const Shape& shape,
                                                             uint64_t bytes) {
  MutexLock lock(&arena_mutex);
  Result<shm::Block> block = arena.Allocate(std::max<uint64_t>(bytes, 1));
  if (!block.ok()) {
    return std::nullopt;
  }
  return AllocatedTensor{dtype, shape, arena.Bytes(*block).first(bytes), block->offset};
}

// Copies the model-input tensors (ordered as request_inputs(), each a whole block) into one
// block per piece and input; fills p->pieces. The source blocks are not freed.
Status HookHost::Impl::MakePieces(Pending& p, std::span<const TensorMeta> inputs,
                                  std::span<const std::span<const uint8_t>> bytes,
                                  const std::vector<int64_t>& piece_rows) {
  const std::vector<TensorSpec>& specs = p.model->manifest().request_inputs();
  int64_t first_row = 0;
  for (int64_t rows : piece_rows) {
    Piece piece;
    piece.rows = rows;
    for (size_t i = 0; i < inputs.size(); ++i) {
      Shape shape(inputs[i].shape.begin(), inputs[i].shape.end());
      uint64_t row_bytes = 0, offset = 0;
      if (specs[i].batch_axis) {  // Axis 0 whenever there is more than one piece.
        row_bytes = inputs[i].bytes / static_cast<uint64_t>(p.model_rows);
        shape[static_cast<size_t>(*specs[i].batch_axis)] = rows;
        offset = static_cast<uint64_t>(first_row) * row_bytes;
      }
      uint64_t n = specs[i].batch_axis ? row_bytes * static_cast<uint64_t>(rows) : inputs[i].bytes;
      std::optional<AllocatedTensor> block = AllocateTensor(inputs[i].dtype, shape);
      if (!block) {
        for (Piece& made : p.pieces) {
          FreeBlocks(made.input_blocks);
        }
        FreeBlocks(piece.input_blocks);
        p.pieces.clear();
        return ResourceExhausted("model '" + p.model->name +
                                 "': this hook host's arena is full (retry in " +
                                 std::to_string(kRetryAfterMs) + " ms)");
      }
      std::memcpy(block->bytes.data(), bytes[i].data() + offset, n);
      piece.input_blocks.push_back(block->block);
      piece.tensors.push_back(shm::MakeTensorRef(slot, block->block, n, inputs[i].dtype, shape));
    }
    p.pieces.push_back(std::move(piece));
    first_row += rows;
  }
  SetOutputBytes(p, piece_rows);
  return OkStatus();
}

// The outputs' bytes of the largest piece in the worker's arena; the piece count.
void HookHost::Impl::SetOutputBytes(Pending& p, const std::vector<int64_t>& piece_rows) {
  const Manifest& m = p.model->manifest();
  p.output_bytes = 0;
  for (size_t o = 0; o < m.outputs.size(); ++o) {
    Shape shape = m.variants[static_cast<size_t>(p.variant)].outputs.at(m.outputs[o].name);
    if (m.outputs[o].batch_axis) {
      shape[static_cast<size_t>(*m.outputs[o].batch_axis)] = piece_rows.front();
    }
    p.output_bytes +=
        shm::AlignUp(TensorByteSize(m.outputs[o].dtype, shape).value_or(0), shm::kBlockAlignment);
  }
  p.pieces_left = p.pieces.size();
  p.timings.pieces = static_cast<int>(p.pieces.size());
}

// Model inputs ready (in `inputs`, ordered as request_inputs()): variant, split, hand off.
// `adopt`: arena blocks already holding `inputs` (a plugin's outputs); a request sent in one
// piece then uses them as they are (*adopted set: the pieces own them now), else they are
// copied into the pieces' blocks and stay the caller's.
Status HookHost::Impl::Route(const PendingPtr& p, std::span<const TensorMeta> inputs,
                             std::span<const std::span<const uint8_t>> bytes,
                             std::span<const uint64_t> adopt, bool* adopted) {
  const HookModel& model = *p->model;
  int64_t rows = 0;
  FERRY_ASSIGN_OR_RETURN(p->variant, MatchVariant(model.name, model.manifest(), inputs, &rows));
  if (model.manifest().stateful() && rows != 1) {  // Before any split: pieces would share it.
    return InvalidArgument("model '" + model.name +
                           "' is stateful: a request is one row of its "
                           "sequence, got " +
                           std::to_string(rows));
  }
  FERRY_RETURN_IF_ERROR(CheckRanges(model.name, model.manifest().request_inputs(), inputs, bytes));
  p->model_rows = rows;
  bool preserved = p->subcall || model.plugin == nullptr || !model.plugin->has_preprocess() ||
                   (model.plugin->preserves_rows() && model.manifest().hooks.preserves_rows);
  FERRY_ASSIGN_OR_RETURN(
      std::vector<int64_t> piece_rows,
      PieceRows(model.name, model.manifest(), rows, preserved, segment.ring_capacity()));
  if (!adopt.empty() && piece_rows.size() == 1) {
    Piece piece;
    piece.rows = rows;
    for (size_t i = 0; i < inputs.size(); ++i) {
      piece.input_blocks.push_back(adopt[i]);
      piece.tensors.push_back(
          shm::MakeTensorRef(slot, adopt[i], inputs[i].bytes, inputs[i].dtype, inputs[i].shape));
    }
    p->pieces.push_back(std::move(piece));
    SetOutputBytes(*p, piece_rows);
    *adopted = true;
  } else {
    FERRY_RETURN_IF_ERROR(MakePieces(*p, inputs, bytes, piece_rows));
  }
  Handoff(p);
  return OkStatus();
}

// On a hook thread: preprocess the client tensors (in `client` blocks), then route.
void HookHost::Impl::Preprocess(const PendingPtr& p, std::vector<AllocatedTensor> client,
                                std::vector<std::string> names) {
  const HookModel& model = *p->model;
  const Manifest& m = model.manifest();
  int64_t start = MonotonicNs();
  std::vector<TensorView> plugin_inputs;
  for (size_t i = 0; i < client.size(); ++i) {
    plugin_inputs.push_back({names[i], client[i].dtype, client[i].shape, client[i].bytes});
  }
  std::vector<std::string> wanted;
  for (const TensorSpec& t : m.inputs) {
    wanted.push_back(t.name);
  }
  std::vector<AllocatedTensor> produced;
  Status s = WatchedCall(p, "preprocess", &p->timings.plugin_ns, [&] {
    return model.plugin->Preprocess(
        plugin_inputs, wanted,
        [this](uint32_t, DType dtype, const Shape& shape) { return AllocateTensor(dtype, shape); },
        &produced);
  });
  p->timings.preprocess_ns = MonotonicNs() - start;
  std::vector<uint64_t> client_blocks;
  for (const AllocatedTensor& t : client) {
    client_blocks.push_back(t.block);
  }
  FreeBlocks(client_blocks);
  std::vector<uint64_t> produced_blocks;
  for (const AllocatedTensor& t : produced) {
    produced_blocks.push_back(t.block);
  }
  bool adopted = false;
  if (s.ok() && !p->answered.load()) {
    std::vector<TensorMeta> metas;
    std::vector<std::span<const uint8_t>> bytes;
    for (size_t i = 0; i < produced.size(); ++i) {
      metas.push_back({wanted[i], produced[i].dtype, produced[i].shape, produced[i].bytes.size()});
      bytes.push_back(produced[i].bytes);
    }
    s = Route(p, metas, bytes, produced_blocks, &adopted);
    if (!s.ok() && s.error().code == ErrorCode::kInvalidArgument) {
      // The plugin's output does not fit the model: the plugin's fault, not the client's.
      s = Internal("plugin " + model.plugin->path() + " preprocess: " + s.error().message);
    }
  }
  if (!adopted) {
    FreeBlocks(produced_blocks);  // Copied into the pieces' blocks, or not needed.
  }
  if (!s.ok()) {
    Answer(p, s.error());
  }
}

// On a hook thread, once every piece is answered: join, postprocess, respond, release.
void HookHost::Impl::Finish(const PendingPtr& p) {
  int64_t start = MonotonicNs();
  const HookModel& model = *p->model;
  Result<InferResponse> result = Collect(*p);
  std::vector<shm::DescriptorData> to_release;
  for (const Piece& piece : p->pieces) {
    if (piece.completion.kind != 0) {  // Answered by the worker (ok or with a message).
      shm::DescriptorData release = piece.completion;
      release.kind = static_cast<uint16_t>(shm::DescriptorKind::kRelease);
      release.num_tensors = 0;
      release.sender_generation = generation;
      to_release.push_back(release);
    }
  }
  {
    // Collect copied the outputs: the worker gets its blocks back before postprocess runs.
    MutexLock lock(&handoff_mutex);
    for (const shm::DescriptorData& r : to_release) {
      releases_in.emplace_back(p->worker, r);
    }
  }
  WakeTransport();
  if (result.ok() && !p->subcall && !p->answered.load() && model.plugin != nullptr &&
      model.plugin->has_postprocess()) {
    result = Postprocess(p, std::move(*result));
  }
  if (result.ok()) {
    result->timings.postprocess_ns = MonotonicNs() - start;
    result->timings.total_ns = MonotonicNs() - p->start_ns;
  }
  Answer(p, std::move(result));
}

// The joined model outputs, copied out of the worker's arena (checked against the manifest,
// and against the worker restarting while they were read).
Result<InferResponse> HookHost::Impl::Collect(Pending& p) {
  const Manifest& m = p.model->manifest();
  for (const Piece& piece : p.pieces) {
    if (piece.error) {
      return *piece.error;
    }
  }
  InferResponse response;
  response.timings = p.timings;
  const ShapeVariant& variant = m.variants[static_cast<size_t>(p.variant)];
  int64_t total_rows = 0;
  for (const Piece& piece : p.pieces) {
    total_rows += piece.rows;
  }
  uint32_t worker_slot = workers_slot(p.worker);
  const std::vector<TensorSpec>& outputs = m.request_outputs();  // A stateful model's: no state.
  for (size_t o = 0; o < outputs.size(); ++o) {
    const TensorSpec& spec = outputs[o];
    ResponseTensor out;
    out.name = spec.name;
    out.dtype = spec.dtype;
    out.shape = variant.outputs.at(spec.name);
    if (spec.batch_axis) {
      out.shape[static_cast<size_t>(*spec.batch_axis)] = total_rows;
    }
    for (const Piece& piece : p.pieces) {
      const shm::DescriptorData& c = piece.completion;
      Shape want = variant.outputs.at(spec.name);
      if (spec.batch_axis) {
        want[static_cast<size_t>(*spec.batch_axis)] = piece.rows;
      }
      const shm::TensorRefData& t = c.tensors[o];
      if (c.num_tensors != outputs.size() || t.dtype != static_cast<uint16_t>(spec.dtype) ||
          t.rank != want.size() || !std::equal(want.begin(), want.end(), t.shape)) {
        return Internal("model '" + p.model->name + "': the worker's output '" + spec.name +
                        "' is not " + DescribeTensor(spec.dtype, want));
      }
      std::span<uint8_t> bytes = shm::TensorBytes(segment, t);
      out.bytes.insert(out.bytes.end(), bytes.begin(), bytes.end());
    }
    response.outputs.push_back(std::move(out));
  }
  for (const Piece& piece : p.pieces) {
    if (!shm::StillCurrent(segment, worker_slot, piece.completion.sender_generation)) {
      return Unavailable("model '" + p.model->name +
                         "': the worker restarted while its outputs were read");
    }
  }
  return response;
}

Result<InferResponse> HookHost::Impl::Postprocess(const PendingPtr& p, InferResponse joined) {
  const HookModel& model = *p->model;
  const std::vector<TensorSpec>& specs = model.manifest().client_outputs();
  std::vector<TensorView> plugin_inputs;
  for (const ResponseTensor& t : joined.outputs) {
    plugin_inputs.push_back({t.name, t.dtype, t.shape, t.bytes});
  }
  std::vector<std::string> names;
  for (const TensorSpec& t : specs) {
    names.push_back(t.name);
  }
  std::vector<AllocatedTensor> produced;
  Status s = WatchedCall(p, "postprocess", &joined.timings.plugin_ns, [&] {
    return model.plugin->Postprocess(
        plugin_inputs, names,
        [this](uint32_t, DType dtype, const Shape& shape) { return AllocateTensor(dtype, shape); },
        &produced);
  });
  InferResponse response;
  response.timings = joined.timings;
  if (s.ok()) {
    s = TakeOutputs(model, "postprocess", specs, produced, &response.outputs);
  }
  FreeProduced(produced);
  if (!s.ok()) {
    return s.error();
  }
  return response;
}

// A plugin's response tensors, each checked against its spec, copied into `*out`.
Status HookHost::Impl::TakeOutputs(const HookModel& model, std::string_view what,
                                   const std::vector<TensorSpec>& specs,
                                   const std::vector<AllocatedTensor>& produced,
                                   std::vector<ResponseTensor>* out) {
  for (size_t i = 0; i < produced.size(); ++i) {
    const TensorSpec& spec = specs[i];
    if (!FitsSpec(spec, produced[i].dtype, produced[i].shape)) {
      return Internal("plugin " + model.plugin->path() + " " + std::string(what) + ": output '" +
                      spec.name + "' is " + DescribeTensor(produced[i].dtype, produced[i].shape) +
                      ", the manifest declares " + DescribeTensor(spec.dtype, spec.shape));
    }
    out->push_back({spec.name,
                    produced[i].dtype,
                    produced[i].shape,
                    {produced[i].bytes.begin(), produced[i].bytes.end()}});
  }
  return OkStatus();
}

void HookHost::Impl::FreeProduced(const std::vector<AllocatedTensor>& produced) {
  std::vector<uint64_t> blocks;
  for (const AllocatedTensor& t : produced) {
    blocks.push_back(t.block);
  }
  FreeBlocks(blocks);
}

}  // namespace ferry::hookhost
