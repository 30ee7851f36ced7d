#include "kv_cache/block_manager.h"

#include <algorithm>

#include "common/check.h"

namespace ds {

BlockManager::BlockManager(int num_blocks, bool enable_prefix_caching)
    : num_blocks_(num_blocks), prefix_caching_(enable_prefix_caching), blocks_(num_blocks) {
  DS_CHECK(num_blocks > 0) << "KV pool needs at least one block";
  free_plain_.reserve(num_blocks);
  for (int i = num_blocks - 1; i >= 0; --i) free_plain_.push_back(i);  // pop_back gives 0 first
}

uint64_t BlockManager::HashBlock(uint64_t parent, const int32_t* tokens, int n) {
  // 64-bit FNV-1a over the parent key and the token ids, then a splitmix finaliser.
  uint64_t h = 1469598103934665603ull ^ (parent * 0x9E3779B97F4A7C15ull);
  for (int i = 0; i < n; ++i) {
    uint32_t t = static_cast<uint32_t>(tokens[i]);
    for (int b = 0; b < 4; ++b) {
      h ^= (t >> (8 * b)) & 0xff;
      h *= 1099511628211ull;
    }
  }
  h ^= h >> 30; h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 27; h *= 0x94d049bb133111ebull;
  h ^= h >> 31;
  return h;
}

PrefixMatch BlockManager::Match(const std::vector<int32_t>& tokens, int max_tokens) const {
  PrefixMatch m;
  if (!prefix_caching_) return m;
  max_tokens = std::min<int>(max_tokens, static_cast<int>(tokens.size()));
  uint64_t parent = 0;
  for (int b = 0; (b + 1) * kBlockSize <= max_tokens; ++b) {
    const int32_t* t = tokens.data() + b * kBlockSize;
    uint64_t h = HashBlock(parent, t, kBlockSize);
    auto it = by_hash_.find(h);
    if (it == by_hash_.end()) break;
    const Block& blk = blocks_[it->second];
    if (blk.parent != parent || !std::equal(blk.tokens.begin(), blk.tokens.end(), t)) break;
    m.block_ids.push_back(it->second);
    m.hashes.push_back(h);
    if (blk.ref_count == 0) ++m.num_free;
    parent = h;
  }
  return m;
}

void BlockManager::TakePrefix(SeqBlocks* seq, const PrefixMatch& match, int query_tokens) {
  DS_CHECK(seq->ids.empty()) << "TakePrefix on a sequence that holds blocks";
  if (prefix_caching_) {
    query_tokens_ += query_tokens;
    hit_tokens_ += match.num_tokens();
  }
  for (size_t i = 0; i < match.block_ids.size(); ++i) {
    Block& blk = blocks_[match.block_ids[i]];
    DS_CHECK(blk.hashed && blk.hash == match.hashes[i]) << "stale prefix match";
    if (blk.ref_count == 0) evictable_.erase(blk.lru_it);
    ++blk.ref_count;
    seq->ids.push_back(match.block_ids[i]);
  }
  seq->num_hashed = static_cast<int>(match.block_ids.size());
  seq->last_hash = match.hashes.empty() ? 0 : match.hashes.back();
}

int32_t BlockManager::AllocateOne() {
  int32_t id;
  if (!free_plain_.empty()) {
    id = free_plain_.back();
    free_plain_.pop_back();
  } else if (!evictable_.empty()) {
    id = evictable_.front();
    evictable_.pop_front();
    Block& blk = blocks_[id];
    by_hash_.erase(blk.hash);
    blk.hashed = false;
    blk.tokens.clear();
    ++evictions_;
  } else {
    return -1;
  }
  blocks_[id].ref_count = 1;
  return id;
}

bool BlockManager::Grow(SeqBlocks* seq, int num_tokens) {
  const int need = (num_tokens + kBlockSize - 1) / kBlockSize - static_cast<int>(seq->ids.size());
  if (need <= 0) return true;
  if (need > num_free_blocks()) return false;
  for (int i = 0; i < need; ++i) {
    int32_t id = AllocateOne();
    DS_CHECK(id >= 0);
    seq->ids.push_back(id);
  }
  return true;
}

void BlockManager::CommitFullBlocks(SeqBlocks* seq, const std::vector<int32_t>& tokens,
                                    int num_computed) {
  if (!prefix_caching_) return;
  const int full = std::min<int>(num_computed, static_cast<int>(tokens.size())) / kBlockSize;
  DS_CHECK_LE(full, static_cast<int>(seq->ids.size()));
  while (seq->num_hashed < full) {
    const int b = seq->num_hashed;
    const int32_t* t = tokens.data() + b * kBlockSize;
    uint64_t h = HashBlock(seq->last_hash, t, kBlockSize);
    Block& blk = blocks_[seq->ids[b]];
    if (!blk.hashed && by_hash_.find(h) == by_hash_.end()) {
      blk.hashed = true;
      blk.hash = h;
      blk.parent = seq->last_hash;
      blk.tokens.assign(t, t + kBlockSize);
      by_hash_[h] = seq->ids[b];
    }
    // else: an identical block was registered by another sequence first; ours stays private
    // (freed to the plain list), and the chain continues by key.
    seq->last_hash = h;
    ++seq->num_hashed;
  }
}

void BlockManager::Release(int32_t id) {
  Block& blk = blocks_[id];
  DS_CHECK(blk.ref_count > 0) << "double free of KV block " << id;
  if (--blk.ref_count > 0) return;
  if (blk.hashed) {
    blk.lru_it = evictable_.insert(evictable_.end(), id);
  } else {
    free_plain_.push_back(id);
  }
}

void BlockManager::Free(SeqBlocks* seq) {
  for (auto it = seq->ids.rbegin(); it != seq->ids.rend(); ++it) Release(*it);
  seq->ids.clear();
  seq->num_hashed = 0;
  seq->last_hash = 0;
}

void BlockManager::CheckInvariants() const {
  int free_count = 0, hashed = 0;
  std::vector<char> in_free(num_blocks_, 0);
  for (int32_t id : free_plain_) {
    DS_CHECK(!in_free[id]) << "block " << id << " twice in free list";
    in_free[id] = 1;
    DS_CHECK(blocks_[id].ref_count == 0 && !blocks_[id].hashed);
  }
  for (int32_t id : evictable_) {
    DS_CHECK(!in_free[id]) << "block " << id << " twice in free lists";
    in_free[id] = 1;
    DS_CHECK(blocks_[id].ref_count == 0 && blocks_[id].hashed);
  }
  for (int i = 0; i < num_blocks_; ++i) {
    const Block& b = blocks_[i];
    DS_CHECK(b.ref_count >= 0);
    if (b.ref_count == 0) {
      ++free_count;
      DS_CHECK(in_free[i]) << "block " << i << " has ref 0 but is in no free list";
    }
    if (b.hashed) {
      ++hashed;
      auto it = by_hash_.find(b.hash);
      DS_CHECK(it != by_hash_.end() && it->second == i) << "hash map out of sync for block " << i;
    }
  }
  DS_CHECK_EQ(free_count, num_free_blocks());
  DS_CHECK_EQ(hashed, static_cast<int>(by_hash_.size()));
}

}  // namespace ds
