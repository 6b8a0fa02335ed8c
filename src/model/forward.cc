// The forward pass (ForwardPass, forward_pass.h): a batch of rows of any sequences through every
// layer, logits for the rows that want them. Architecture differences are fields of ModelConfig
// read here (norms, biases, rotary pairs, activations, sliding windows), not branches on the
// architecture's name.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "base/error.h"
#include "model/model.h"
#include "tensor/quantize.h"

namespace specd {
namespace {

// Charges the time since the previous mark to an op of a profile; no clock reads without one.
class ProfileMarks {
  using Clock = std::chrono::steady_clock;

 public:
  explicit ProfileMarks(ForwardProfile* profile) : profile_(profile) {
    if (profile_ != nullptr) last_ = Clock::now();
  }
  void Mark(ForwardProfile::Op op) {
    if (profile_ == nullptr) return;
    const Clock::time_point now = Clock::now();
    profile_->ms[op] += std::chrono::duration<double, std::milli>(now - last_).count();
    last_ = now;
  }
  // Restarts the clock without charging anything (time already charged by inner marks).
  void Skip() {
    if (profile_ != nullptr) last_ = Clock::now();
  }

 private:
  ForwardProfile* profile_;
  Clock::time_point last_{};
};

}  // namespace

int64_t Batch::n_outputs() const {
  int64_t n = 0;
  for (uint8_t o : output) n += o != 0;
  return n;
}

std::unique_ptr<KvCache> Model::NewKvCache(const KvCacheConfig& config) const {
  return std::make_unique<KvCache>(config, config_.n_layer, config_.kv_dim());
}

void ForwardPass::Validate(const Batch& batch, const KvCache& kv) const {
  const int64_t n = batch.size();
  SPECD_CHECK(batch.positions.size() == static_cast<size_t>(n) &&
                  batch.slots.size() == static_cast<size_t>(n) &&
                  batch.output.size() == static_cast<size_t>(n) &&
                  (batch.parents.empty() || batch.parents.size() == static_cast<size_t>(n)),
              "batch: token, position, sequence, output and parent arrays differ in length");
  SPECD_CHECK(kv.kv_dim() == config_.kv_dim(), "KV cache was made for another model");
  std::vector<bool> seen(kv.n_slots(), false);
  for (int64_t r = 0; r < n;) {
    const int32_t seq = batch.slots[r];
    SPECD_CHECK(kv.InUse(seq), "batch row ", r, ": sequence ", seq, " is not an active sequence");
    SPECD_CHECK(!seen[seq], "batch: the rows of sequence ", seq, " are not contiguous");
    seen[seq] = true;
    const int64_t first_row = r;
    const int32_t kv_length = kv.Length(seq);
    for (; r < n && batch.slots[r] == seq; ++r) {
      SPECD_CHECK(batch.tokens[r] >= 0 && batch.tokens[r] < config_.n_vocab, "batch row ", r,
                  ": token ", batch.tokens[r], " is outside the vocabulary of ", config_.n_vocab);
      const int32_t parent = batch.parents.empty() ? -1 : batch.parents[r];
      SPECD_CHECK(
          parent == -1 || parent == Batch::kCommittedParent || (parent >= first_row && parent < r),
          "batch row ", r, ": parent row ", parent, " is not an earlier row of sequence ", seq);
      const int32_t expected = parent >= 0 ? batch.positions[parent] + 1
                               : r == first_row || parent == Batch::kCommittedParent
                                   ? kv_length
                                   : batch.positions[r - 1] + 1;
      SPECD_CHECK(batch.positions[r] == expected, "batch row ", r, ": sequence ", seq,
                  " expects position ", expected, ", got ", batch.positions[r]);
      SPECD_CHECK(kv_length + (r - first_row) < kv.n_ctx(), "sequence ", seq,
                  " would exceed the context of ", kv.n_ctx(), " tokens");
    }
  }
}

void ForwardPass::SetUpAttention(const Batch& batch, const KvCache& kv, AttentionRows* rows) {
  const int64_t m = batch.size();
  scratch_.kv_index.resize(m);
  rows->n_visible.resize(m);
  rows->key_mask.clear();
  rows->key_mask_offset.clear();
  bool tree = false;
  for (int32_t p : batch.parents) tree = tree || p != -1;
  int64_t first_row = 0;
  for (int64_t r = 0; r < m; ++r) {
    if (r == 0 || batch.slots[r] != batch.slots[r - 1]) {
      first_row = r;
      rows->seq_row_begin.push_back(r);
    }
    scratch_.kv_index[r] = kv.Length(batch.slots[r]) + static_cast<int32_t>(r - first_row);
    rows->n_visible[r] = scratch_.kv_index[r] + 1;
    if (!tree) continue;
    // Committed keys and the row's ancestors (a chain row's parent is the row before it).
    const int32_t committed = kv.Length(batch.slots[r]);
    rows->key_mask_offset.push_back(static_cast<int64_t>(rows->key_mask.size()));
    rows->key_mask.resize(rows->key_mask.size() + rows->n_visible[r], 0);
    uint8_t* mask = rows->key_mask.data() + rows->key_mask_offset.back();
    std::fill(mask, mask + committed, 1);
    for (int64_t a = r; a >= first_row;) {
      mask[committed + (a - first_row)] = 1;
      const int32_t parent = batch.parents[a];
      a = parent >= 0 ? parent : parent == Batch::kCommittedParent ? first_row - 1 : a - 1;
    }
  }
  rows->seq_row_begin.push_back(m);
}

const char* ForwardProfile::Name(int op) {
  static constexpr const char* kNames[kCount] = {"embed + rope angles",
                                                 "rms norm",
                                                 "q/k/v matmul",
                                                 "rope + kv write",
                                                 "attention",
                                                 "attention out matmul",
                                                 "gate/up matmul + swiglu",
                                                 "down matmul",
                                                 "residual adds",
                                                 "output norm + logits matmul",
                                                 "layer-parallel attention"};
  return op >= 0 && op < kCount ? kNames[op] : "?";
}

void Model::WarmUp(const KernelContext& ctx, int rows) {
  auto kv = NewKvCache({1, rows});
  const int seq = kv->Acquire();
  std::vector<float> logits;
  ForwardExtras extras;
  std::vector<float> input_rows;  // [rows, n_embd], an EAGLE head's input
  if (config_.eagle) {
    input_rows.assign(static_cast<size_t>(rows) * config_.n_embd, 0.0f);
    extras.input_rows = input_rows.data();
  }
  for (int n : {1, rows}) {
    // A one-row forward (the decode shape), then `rows` rows (a verification's shape).
    kv->Truncate(seq, 0);
    Batch batch;
    for (int i = 0; i < n; ++i)
      batch.Add(config_.bos_token >= 0 ? config_.bos_token : 0, i, seq, true);
    Forward(ctx, batch, *kv, AttentionMode::kSplit, &logits, extras);
  }
}

void ForwardPass::EmbedTokens(std::span<const int32_t> tokens, float* out) const {
  SPECD_CHECK(!config_.eagle, "an EAGLE head has no token embedding");
  const int64_t d = config_.n_embd;
  for (size_t r = 0; r < tokens.size(); ++r) {
    const int32_t token = tokens[r];
    SPECD_CHECK(token >= 0 && token < config_.n_vocab, "token ", token,
                " is outside the vocabulary");
    float* xr = out + r * d;
    const int64_t row = config_.input_rows.empty() ? token : config_.input_rows[token];
    DequantizeRow(weights_.token_embd.type, weights_.token_embd.Row(row), xr, d);
    if (weights_.token_embd.row_scales != nullptr) {  // i8 embeddings: the row's scale
      for (int64_t i = 0; i < d; ++i) xr[i] *= weights_.token_embd.row_scales[row];
    }
    if (const float* delta = weights_.embedding_lora.Find(token)) {
      for (int64_t i = 0; i < d; ++i) xr[i] += delta[i];
    }
    if (config_.embd_scale != 1.0f) {
      for (int64_t i = 0; i < d; ++i) xr[i] *= config_.embd_scale;
    }
  }
}

void Model::Forward(const KernelContext& ctx, const Batch& batch, KvCache& kv,
                    AttentionMode attention, std::vector<float>* logits, const LayerGroups* fuzzy) {
  ForwardExtras extras;
  extras.fuzzy = fuzzy;
  Forward(ctx, batch, kv, attention, logits, extras);
}

void Model::Forward(const KernelContext& ctx, const Batch& batch, KvCache& kv,
                    AttentionMode attention, std::vector<float>* logits,
                    const ForwardExtras& extras) {
  pass_.Run(ctx, batch, kv, attention, logits, extras);
}

void ForwardPass::Run(const KernelContext& ctx, const Batch& batch, KvCache& kv,
                      AttentionMode attention, std::vector<float>* logits,
                      const ForwardExtras& extras) {
  SPECD_CHECK(extras.input_rows != nullptr || !config_.eagle,
              "an EAGLE head's forward needs its input rows");
  Validate(batch, kv);
  if (extras.fuzzy != nullptr) extras.fuzzy->Validate(config_.n_layer);
  ProfileMarks marks(profile_);
  if (profile_ != nullptr) ++profile_->n_forwards;
  logits->resize(batch.n_outputs() * config_.n_vocab);  // fully written by the output matmul
  if (batch.size() == 0) return;

  InputRows(batch, kv, extras.input_rows);
  marks.Mark(ForwardProfile::kEmbed);
  PrepareAttentionRows(batch, kv);
  RunLayers(ctx, batch, kv, attention, extras.fuzzy);
  marks.Skip();  // the blocks charged their own time
  const int64_t m = batch.size();
  const int64_t d = config_.n_embd;
  if (extras.hidden != nullptr) {
    extras.hidden->resize(m * d);  // [m, n_embd]
    RmsNorm(scratch_.x.data(), weights_.output_norm.data(), extras.hidden->data(), m, d,
            config_.rms_eps);
  }
  GrowHead(ctx, batch);
  OutputLogits(ctx, batch, logits);
  marks.Mark(ForwardProfile::kLogits);
  AdvanceCache(batch, kv);
}

void ForwardPass::InputRows(const Batch& batch, const KvCache& kv, const float* input_rows) {
  const ModelConfig& c = config_;
  const int64_t m = batch.size();
  const int64_t d = c.n_embd;
  const int half = c.rope.rotary_dim / 2;
  scratch_.x.ResizeForOverwrite(m * d);            // [m, n_embd] residual stream
  scratch_.xb.ResizeForOverwrite(m * d);           // [m, n_embd] normalized
  scratch_.gate.ResizeForOverwrite(m * c.n_ff);    // [m, n_ff]
  scratch_.up.ResizeForOverwrite(m * c.n_ff);      // [m, n_ff]
  scratch_.ffn.ResizeForOverwrite(m * d);          // [m, n_embd]
  scratch_.rope_cos.ResizeForOverwrite(m * half);  // [m, rotary_dim / 2]
  scratch_.rope_sin.ResizeForOverwrite(m * half);  // [m, rotary_dim / 2]
  const bool local_rope = c.sliding_window > 0;
  if (local_rope) {
    scratch_.rope_local_cos.ResizeForOverwrite(m * half);  // [m, rotary_dim / 2]
    scratch_.rope_local_sin.ResizeForOverwrite(m * half);  // [m, rotary_dim / 2]
    scratch_.window_first.resize(m);
  }
  if (input_rows != nullptr) {
    std::copy(input_rows, input_rows + m * d, scratch_.x.data());
  } else {
    EmbedTokens(batch.tokens, scratch_.x.data());
  }
  const RopeConfig& global_rope = c.GlobalRope(kv.n_ctx());
  for (int64_t r = 0; r < m; ++r) {
    const int32_t pos = batch.positions[r];
    RopeAngles(global_rope, pos, scratch_.rope_cos.data() + r * half,
               scratch_.rope_sin.data() + r * half);
    if (local_rope) {
      RopeAngles(c.rope_local, pos, scratch_.rope_local_cos.data() + r * half,
                 scratch_.rope_local_sin.data() + r * half);
      scratch_.window_first[r] = std::max(0, pos + 1 - c.sliding_window);
    }
  }
}

void ForwardPass::PrepareAttentionRows(const Batch& batch, const KvCache& kv) {
  const ModelConfig& c = config_;
  const int64_t m = batch.size();
  AttentionRows& rows = scratch_.attn.rows;
  rows = AttentionRows{};
  rows.n_rows = m;
  rows.n_head = c.n_head;
  rows.n_head_kv = c.n_head_kv;
  rows.head_dim = c.head_dim;
  rows.scale = c.attn_scale;
  rows.kv_type = kv.type();
  rows.k.resize(m);
  rows.v.resize(m);
  SetUpAttention(batch, kv, &rows);
  if (trace_ != nullptr) {
    for (auto* t : {&trace_->hidden, &trace_->attn_input, &trace_->q, &trace_->k, &trace_->v})
      t->assign(c.n_layer, {});
  }
}

void ForwardPass::RunLayers(const KernelContext& ctx, const Batch& batch, KvCache& kv,
                            AttentionMode attention, const LayerGroups* fuzzy) {
  const int64_t m = batch.size();
  const int64_t d = config_.n_embd;
  size_t next_group = 0;
  for (int il = 0; il < config_.n_layer;) {
    if (fuzzy != nullptr && next_group < fuzzy->groups.size() &&
        fuzzy->groups[next_group].first == il) {
      const int count = fuzzy->groups[next_group++].second;
      FuzzyGroup(ctx, il, count, batch, kv, attention);
      il += count;
      continue;
    }
    if (trace_ != nullptr) trace_->hidden[il].assign(scratch_.x.data(), scratch_.x.data() + m * d);
    AttentionBlock(ctx, il, batch, kv, scratch_.x.data(), scratch_.attn, attention, profile_);
    TraceLayer(il, scratch_.attn, m);
    for (int64_t i = 0; i < m * d; ++i) scratch_.x[i] += scratch_.attn.out[i];
    FfnBlock(ctx, il, m);
    ++il;
  }
}

void ForwardPass::OutputLogits(const KernelContext& ctx, const Batch& batch,
                               std::vector<float>* logits) {
  const ModelConfig& c = config_;
  const int64_t d = c.n_embd;
  // Only the rows that want logits go through the (large) output matrix.
  const int64_t n_out = batch.n_outputs();
  scratch_.out_rows.ResizeForOverwrite(n_out * d);  // [n_out, n_embd]
  for (int64_t r = 0, o = 0; r < batch.size(); ++r) {
    if (batch.output[r]) {
      RmsNorm(scratch_.x.data() + r * d, weights_.output_norm.data(),
              scratch_.out_rows.data() + o * d, 1, d, c.rms_eps);
      ++o;
    }
  }
  if (maxima_ != nullptr) RecordMax(scratch_.out_rows.data(), n_out, d, &maxima_->output_in);
  if (c.head_tokens.empty()) {
    Matmul(ctx, scratch_.out_rows.data(), n_out, weights_.output, logits->data(),
           &scratch_.matmul_scratch);
    AddHeadLora(ctx, scratch_.out_rows.data(), n_out, logits->data());
    return;
  }
  // A restricted head: its logits scattered into the vocabulary, -infinity elsewhere.
  const int64_t n_head = static_cast<int64_t>(c.head_tokens.size());
  scratch_.head_logits.ResizeForOverwrite(n_out * n_head);  // [n_out, n_head_tokens]
  Matmul(ctx, scratch_.out_rows.data(), n_out, weights_.output, scratch_.head_logits.data(),
         &scratch_.matmul_scratch);
  std::fill(logits->begin(), logits->end(), -std::numeric_limits<float>::infinity());
  for (int64_t o = 0; o < n_out; ++o) {
    float* row = logits->data() + o * c.n_vocab;
    const float* head_row = scratch_.head_logits.data() + o * n_head;
    for (int64_t j = 0; j < n_head; ++j) row[c.head_tokens[j]] = head_row[j];
  }
  ContextHeadLogits(ctx, n_out, logits);
}

void ForwardPass::GrowHead(const KernelContext& ctx, const Batch& batch) {
  ModelWeights::ContextHead& h = weights_.context_head;
  // An i8 file's head (row scales) stays as listed.
  if (h.max_tokens == 0 || h.full_output.row_scales != nullptr) return;
  const int64_t before = static_cast<int64_t>(h.tokens.size());
  const int64_t row_bytes = RowBytes(h.full_output.type, h.full_output.cols);
  for (const int32_t token : batch.tokens) {
    if (static_cast<int64_t>(h.tokens.size()) >= h.max_tokens) break;
    if (token < 0 || token >= config_.n_vocab || h.in_head[token]) continue;
    h.in_head[token] = 1;
    h.tokens.push_back(token);
    const uint8_t* row = h.full_output.Row(token);
    h.rows.insert(h.rows.end(), row, row + row_bytes);
  }
  if (static_cast<int64_t>(h.tokens.size()) == before) return;
  // The joined rows as one matrix, packed for the fast kernels as the head is.
  h.view = h.full_output;
  h.view.data = h.rows.data();
  h.view.rows = static_cast<int64_t>(h.tokens.size());
  h.view.packed = nullptr;
  h.packed.reset();
  if (ctx.cpu.packed_kernels() && IsPackable(h.view.type) && h.view.cols % 32 == 0) {
    h.packed =
        std::make_unique<PackedInt8Weights>(PackInt8(h.view, ctx.pool, HighBitsFor(ctx.cpu)));
    h.view.packed = h.packed.get();
  }
}

void ForwardPass::ContextHeadLogits(const KernelContext& ctx, int64_t n_out,
                                    std::vector<float>* logits) {
  ModelWeights::ContextHead& h = weights_.context_head;
  const int64_t n = static_cast<int64_t>(h.tokens.size());
  if (n == 0) return;
  h.logits.ResizeForOverwrite(n_out * n);  // [n_out, joined tokens]
  Matmul(ctx, scratch_.out_rows.data(), n_out, h.view, h.logits.data(), &scratch_.matmul_scratch);
  for (int64_t o = 0; o < n_out; ++o) {
    float* row = logits->data() + o * config_.n_vocab;
    const float* joined = h.logits.data() + o * n;
    for (int64_t j = 0; j < n; ++j) row[h.tokens[j]] = joined[j];
  }
}

void ForwardPass::AdvanceCache(const Batch& batch, KvCache& kv) {
  const int64_t m = batch.size();
  int32_t prev = -1;
  for (int64_t r = 0; r < m; ++r) {
    if (batch.slots[r] != prev) {
      prev = batch.slots[r];
      int64_t count = 0;
      while (r + count < m && batch.slots[r + count] == prev) ++count;
      kv.Advance(prev, static_cast<int>(count));
    }
  }
}

void ForwardPass::FuzzyGroup(const KernelContext& ctx, int first, int count, const Batch& batch,
                             KvCache& kv, AttentionMode attention) {
  ProfileMarks marks(profile_);
  const int64_t m = batch.size();
  const int64_t d = config_.n_embd;
  const int n_threads = ctx.pool->size();
  while (static_cast<int>(scratch_.lanes.size()) < count) {
    scratch_.lanes.push_back(std::make_unique<AttentionScratch>());
  }
  while (static_cast<int>(scratch_.lane_pools.size()) < n_threads) {
    scratch_.lane_pools.push_back(std::make_unique<ThreadPool>(1));
  }
  for (int j = 0; j < count; ++j)
    scratch_.lanes[j]->rows = scratch_.attn.rows;  // the same rows, own buffers
  ctx.pool->RunOnAll([&](int t) {
    const KernelContext lane_ctx{scratch_.lane_pools[t].get(), ctx.cpu};
    for (int j = t; j < count; j += n_threads) {
      AttentionBlock(lane_ctx, first + j, batch, kv, scratch_.x.data(), *scratch_.lanes[j],
                     attention, nullptr);
    }
  });
  marks.Mark(ForwardProfile::kParallelAttention);
  for (int j = 0; j < count; ++j) {
    const int il = first + j;
    if (trace_ != nullptr) {
      trace_->hidden[il].assign(scratch_.x.data(), scratch_.x.data() + m * d);
      TraceLayer(il, *scratch_.lanes[j], m);
    }
    for (int64_t i = 0; i < m * d; ++i) scratch_.x[i] += scratch_.lanes[j]->out[i];
    marks.Mark(ForwardProfile::kResidual);
    FfnBlock(ctx, il, m);
    marks.Skip();
  }
}

void ForwardPass::TraceLayer(int il, const AttentionScratch& s, int64_t m) {
  if (trace_ == nullptr) return;
  const int64_t d = config_.n_embd;
  const int64_t q_dim = static_cast<int64_t>(config_.n_head) * config_.head_dim;
  const int64_t kv_dim = config_.kv_dim();
  trace_->attn_input[il].assign(s.xb.data(), s.xb.data() + m * d);
  trace_->q[il].assign(s.q.data(), s.q.data() + m * q_dim);
  trace_->k[il].assign(s.k.data(), s.k.data() + m * kv_dim);
  trace_->v[il].assign(s.v.data(), s.v.data() + m * kv_dim);
}

void ForwardPass::AttentionBlock(const KernelContext& ctx, int il, const Batch& batch, KvCache& kv,
                                 const float* x, AttentionScratch& s, AttentionMode attention,
                                 ForwardProfile* profile) {
  ProfileMarks marks(profile);
  auto mark = [&](ForwardProfile::Op op) { marks.Mark(op); };
  const ModelConfig& c = config_;
  const LayerWeights& l = weights_.layers[il];
  const int64_t m = batch.size();
  const int64_t d = c.n_embd;
  const int64_t q_dim = static_cast<int64_t>(c.n_head) * c.head_dim;
  const int64_t kv_dim = c.kv_dim();
  const int half = c.rope.rotary_dim / 2;
  const bool local = c.IsLocalLayer(il);
  s.xb.ResizeForOverwrite(m * d);       // [m, n_embd] normalized
  s.q.ResizeForOverwrite(m * q_dim);    // [m, n_head * head_dim]
  s.k.ResizeForOverwrite(m * kv_dim);   // [m, kv_dim]
  s.v.ResizeForOverwrite(m * kv_dim);   // [m, kv_dim]
  s.att.ResizeForOverwrite(m * q_dim);  // [m, n_head * head_dim]
  s.out.ResizeForOverwrite(m * d);      // [m, n_embd]
  AttentionRows& rows = s.rows;
  rows.q = s.q.data();
  rows.out = s.att.data();
  RmsNorm(x, l.attn_norm.data(), s.xb.data(), m, d, c.rms_eps);
  if (maxima_ != nullptr) RecordMax(s.xb.data(), m, d, &maxima_->qkv_in[il]);
  mark(ForwardProfile::kNorm);
  if (ctx.cpu.packed_kernels() && l.wqkv.packed != nullptr) {
    const int64_t width = q_dim + 2 * kv_dim;
    s.stacked.ResizeForOverwrite(m * width);  // [m, q_dim + 2 kv_dim]
    Matmul(ctx, s.xb.data(), m, l.wqkv, s.stacked.data(), &s.matmul);
    for (int64_t r = 0; r < m; ++r) {
      const float* row = s.stacked.data() + r * width;
      std::copy(row, row + q_dim, s.q.data() + r * q_dim);
      std::copy(row + q_dim, row + q_dim + kv_dim, s.k.data() + r * kv_dim);
      std::copy(row + q_dim + kv_dim, row + width, s.v.data() + r * kv_dim);
    }
  } else {
    Matmul(ctx, s.xb.data(), m, l.wq, s.q.data(), &s.matmul);
    Matmul(ctx, s.xb.data(), m, l.wk, s.k.data(), &s.matmul);
    Matmul(ctx, s.xb.data(), m, l.wv, s.v.data(), &s.matmul);
  }
  AddLowRank(ctx,
             {{&l.lora[kLoraQ], s.q.data(), q_dim},
              {&l.lora[kLoraK], s.k.data(), kv_dim},
              {&l.lora[kLoraV], s.v.data(), kv_dim}},
             s.xb.data(), m, &s.lora);
  mark(ForwardProfile::kQkv);
  if (c.qk_norm) {  // per head: rows of head_dim values
    RmsNorm(s.q.data(), l.q_norm.data(), s.q.data(), m * c.n_head, c.head_dim, c.rms_eps);
    RmsNorm(s.k.data(), l.k_norm.data(), s.k.data(), m * c.n_head_kv, c.head_dim, c.rms_eps);
  }
  const RopeConfig& rope = local ? c.rope_local : c.rope;
  const float* cos_all = local ? scratch_.rope_local_cos.data() : scratch_.rope_cos.data();
  const float* sin_all = local ? scratch_.rope_local_sin.data() : scratch_.rope_sin.data();
  for (int64_t r = 0; r < m; ++r) {
    float* qr = s.q.data() + r * q_dim;
    float* kr = s.k.data() + r * kv_dim;
    float* vr = s.v.data() + r * kv_dim;
    if (c.qkv_bias) {
      for (int64_t i = 0; i < q_dim; ++i) qr[i] += l.bq[i];
      for (int64_t i = 0; i < kv_dim; ++i) kr[i] += l.bk[i];
      for (int64_t i = 0; i < kv_dim; ++i) vr[i] += l.bv[i];
    }
    Rope(rope, cos_all + r * half, sin_all + r * half, qr, c.n_head);
    Rope(rope, cos_all + r * half, sin_all + r * half, kr, c.n_head_kv);
    const int32_t seq = batch.slots[r];
    const int64_t at = static_cast<int64_t>(scratch_.kv_index[r]) * RowBytes(kv.type(), kv_dim);
    StoreKvRow(ctx, kr, kv_dim, kv.type(), static_cast<uint8_t*>(kv.K(il, seq)) + at);
    StoreKvRow(ctx, vr, kv_dim, kv.type(), static_cast<uint8_t*>(kv.V(il, seq)) + at);
    rows.k[r] = kv.K(il, seq);
    rows.v[r] = kv.V(il, seq);
  }
  if (local) {
    rows.first_visible = scratch_.window_first;
  } else {
    rows.first_visible.clear();
  }
  mark(ForwardProfile::kRopeKvWrite);
  Attention(ctx, rows, attention);
  if (maxima_ != nullptr) RecordMax(s.att.data(), m, q_dim, &maxima_->wo_in[il]);
  mark(ForwardProfile::kAttention);
  Matmul(ctx, s.att.data(), m, l.wo, s.out.data(), &s.matmul);
  AddLowRank(ctx, {{&l.lora[kLoraO], s.out.data(), d}}, s.att.data(), m, &s.lora);
  mark(ForwardProfile::kAttnOut);
  if (c.post_norms) RmsNorm(s.out.data(), l.post_attn_norm.data(), s.out.data(), m, d, c.rms_eps);
  mark(ForwardProfile::kResidual);
}

void ForwardPass::FfnBlock(const KernelContext& ctx, int il, int64_t m) {
  ProfileMarks marks(profile_);
  auto mark = [&](ForwardProfile::Op op) { marks.Mark(op); };
  const ModelConfig& c = config_;
  const LayerWeights& l = weights_.layers[il];
  const int64_t d = c.n_embd;
  auto glu = [&](const float* gate, const float* up, float* y, int64_t n) {
    if (c.activation == FfnActivation::kGeluTanh) {
      GeGlu(ctx, gate, up, y, n);
    } else {
      SwiGlu(ctx, gate, up, y, n);
    }
  };
  RmsNorm(scratch_.x.data(), l.ffn_norm.data(), scratch_.xb.data(), m, d, c.rms_eps);
  mark(ForwardProfile::kNorm);
  if (ctx.cpu.packed_kernels() && l.w_gate_up.packed != nullptr) {
    scratch_.stacked.ResizeForOverwrite(m * 2 * c.n_ff);  // [m, 2 n_ff]: gate then up
    Matmul(ctx, scratch_.xb.data(), m, l.w_gate_up, scratch_.stacked.data(),
           &scratch_.matmul_scratch);
    AddLowRank(ctx,
               {{&l.lora[kLoraGate], scratch_.stacked.data(), 2 * c.n_ff},
                {&l.lora[kLoraUp], scratch_.stacked.data() + c.n_ff, 2 * c.n_ff}},
               scratch_.xb.data(), m, &scratch_.lora_scratch);
    // Rows on the pool's threads (an exp and a few multiplies per value: ~8 multiply-adds).
    ctx.pool->ParallelFor(
        m, 1,
        [&](int64_t r0, int64_t r1) {
          for (int64_t r = r0; r < r1; ++r) {
            const float* row = scratch_.stacked.data() + r * 2 * c.n_ff;
            glu(row, row + c.n_ff, scratch_.gate.data() + r * c.n_ff, c.n_ff);
          }
        },
        MinItemsPerThread(8 * c.n_ff));
  } else {
    Matmul(ctx, scratch_.xb.data(), m, l.w_gate, scratch_.gate.data(), &scratch_.matmul_scratch);
    Matmul(ctx, scratch_.xb.data(), m, l.w_up, scratch_.up.data(), &scratch_.matmul_scratch);
    AddLowRank(ctx,
               {{&l.lora[kLoraGate], scratch_.gate.data(), c.n_ff},
                {&l.lora[kLoraUp], scratch_.up.data(), c.n_ff}},
               scratch_.xb.data(), m, &scratch_.lora_scratch);
    glu(scratch_.gate.data(), scratch_.up.data(), scratch_.gate.data(), m * c.n_ff);
  }
  if (maxima_ != nullptr) {
    RecordMax(scratch_.xb.data(), m, d, &maxima_->gate_up_in[il]);
    RecordMax(scratch_.gate.data(), m, c.n_ff, &maxima_->down_in[il]);
  }
  mark(ForwardProfile::kGateUp);
  Matmul(ctx, scratch_.gate.data(), m, l.w_down, scratch_.ffn.data(), &scratch_.matmul_scratch);
  AddLowRank(ctx, {{&l.lora[kLoraDown], scratch_.ffn.data(), d}}, scratch_.gate.data(), m,
             &scratch_.lora_scratch);
  mark(ForwardProfile::kDown);
  if (c.post_norms)
    RmsNorm(scratch_.ffn.data(), l.post_ffn_norm.data(), scratch_.ffn.data(), m, d, c.rms_eps);
  for (int64_t i = 0; i < m * d; ++i) scratch_.x[i] += scratch_.ffn[i];
  mark(ForwardProfile::kResidual);
}

void ForwardPass::AddHeadLora(const KernelContext& ctx, const float* x, int64_t n_out,
                              float* logits) {
  const int64_t n_vocab = config_.n_vocab;
  AddLowRank(ctx, {{&weights_.output_lora, logits, n_vocab}}, x, n_out, &scratch_.lora_scratch);
  if (!config_.tied_embeddings) return;
  const EmbeddingDelta& e = weights_.embedding_lora;
  for (int64_t o = 0; o < n_out; ++o) {
    for (size_t t = 0; t < e.tokens.size(); ++t) {
      const float* delta = e.rows.data() + t * e.n_embd;
      float dot = 0.0f;  // one fixed order, whatever the batch
      for (int64_t j = 0; j < e.n_embd; ++j) dot += x[o * e.n_embd + j] * delta[j];
      logits[o * n_vocab + e.tokens[t]] += dot;
    }
  }
}

void ForwardPass::RecordMax(const float* x, int64_t m, int64_t n, std::vector<float>* max) {
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t j = 0; j < n; ++j) (*max)[j] = std::max((*max)[j], std::fabs(x[r * n + j]));
  }
}

}  // namespace specd
