// ExpertMap: where each routed expert of each MoE layer lives. The router picks *logical*
// experts (ids 0..num_logical-1, the checkpoint's experts.<e>); the engine runs *physical*
// expert slots (0..num_physical-1, num_physical >= num_logical). A slot holds one logical
// expert; a logical expert may have several slots (redundant replicas, EPLB). With EP over G
// GPUs, slot s lives on GPU s / (num_physical / G).
//
// Layout (per layer l, identical slot count for every layer, as SGLang's ExpertLocationMetadata
// and DeepSeek's EPLB output):
//   physical_to_logical[l][s]  : logical expert held by slot s            [num_layers][num_physical]
//   replicas(l, e)             : the slots holding logical e, ascending   [num_layers][num_logical][*]
// Every layer of the model has a row (dense layers too; they are never consulted), so layer ids
// are the model's layer ids.
//
// Replica choice (static dispatch): the (token t, logical e) pair goes to
//   replicas(l, e)[t mod replicas(l, e).size()]
// which spreads the tokens of a hot expert evenly over its replicas and is deterministic.
//
// JSON (the shape SGLang's --init-expert-location accepts):
//   {"num_logical_experts": E, "num_physical_experts": P,
//    "physical_to_logical_map": [[slot0_expert, ...], ...]}      // [layers][P]
// Both counts are written by Save; on load "num_physical_experts" is optional (checked when
// present) and "num_logical_experts" may be absent when the caller passes the expected count
// (e.g. the model's n_routed_experts).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace ds {

class ExpertMap {
 public:
  ExpertMap() = default;  // no layers

  // Slot s of every layer holds logical s mod num_logical (the identity when num_physical ==
  // num_logical; SGLang's "trivial" placement otherwise). Requires num_physical >= num_logical > 0.
  static ExpertMap Trivial(int num_layers, int num_logical, int num_physical);
  static ExpertMap Identity(int num_layers, int num_logical) {
    return Trivial(num_layers, num_logical, num_logical);
  }

  // Validates and builds: every row has the same slot count >= num_logical, every id is in
  // [0, num_logical), every logical expert has >= 1 slot in every layer. Errors name the layer
  // and slot (or the expert without a replica).
  static StatusOr<ExpertMap> FromPhysicalToLogical(std::vector<std::vector<int32_t>> physical_to_logical,
                                                   int num_logical);

  // JSON text in the format above. expected_num_logical < 0: take it from the file (required
  // then); otherwise the file's value (if present) must agree.
  static StatusOr<ExpertMap> FromJson(const std::string& text, int expected_num_logical = -1);
  static StatusOr<ExpertMap> LoadFile(const std::string& path, int expected_num_logical = -1);
  std::string ToJson() const;
  Status SaveFile(const std::string& path) const;

  int num_layers() const { return static_cast<int>(p2l_.size()); }
  int num_logical() const { return num_logical_; }
  int num_physical() const { return num_physical_; }
  bool empty() const { return p2l_.empty(); }
  // True when every layer has slot s == logical s and no replicas.
  bool is_identity() const;

  int32_t physical_to_logical(int layer, int slot) const { return p2l_[layer][slot]; }
  const std::vector<int32_t>& physical_to_logical(int layer) const { return p2l_[layer]; }
  const std::vector<std::vector<int32_t>>& physical_to_logical_map() const { return p2l_; }
  // Slots holding logical expert e in layer l, ascending; never empty.
  const std::vector<int32_t>& replicas(int layer, int logical) const { return l2p_[layer][logical]; }
  int replica_count(int layer, int logical) const { return static_cast<int>(l2p_[layer][logical].size()); }

  // The physical slot serving (token, logical expert): replicas[token mod count]. token >= 0.
  int32_t ChooseReplica(int layer, int logical, int64_t token) const {
    const std::vector<int32_t>& r = l2p_[layer][logical];
    return r[static_cast<size_t>(token % static_cast<int64_t>(r.size()))];
  }

  // OK when the map fits a model with `num_layers` layers and `num_logical` routed experts.
  Status CheckFits(int num_layers, int num_logical) const;

  bool operator==(const ExpertMap& o) const { return num_logical_ == o.num_logical_ && p2l_ == o.p2l_; }

 private:
  int num_logical_ = 0;
  int num_physical_ = 0;
  std::vector<std::vector<int32_t>> p2l_;               // [layers][num_physical]
  std::vector<std::vector<std::vector<int32_t>>> l2p_;  // [layers][num_logical][replicas]
};

}  // namespace ds
