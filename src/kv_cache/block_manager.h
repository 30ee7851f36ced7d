// BlockManager: the fixed pool of paged latent-KV blocks (kBlockSize = 64 tokens each) and
// the prefix cache over it. The ModelRunner owns the cache memory; this class owns the
// *ids*: which block belongs to which sequence, reference counts, and which full blocks hold
// which token prefix.
//
// Prefix caching (vLLM-style chained block hashes): a full block's key is
// hash(parent block's key, its 64 token ids); a block registered under a key can be shared by
// any sequence whose first (i+1)*64 tokens are identical. Shared blocks are read-only (only a
// sequence's last, partial block is ever written). A block whose reference count drops to 0
// keeps its key and sits in an LRU list of evictable blocks; allocation takes never-cached
// free blocks first, then evicts the least recently freed cached block. Keys are verified
// against the stored tokens, so a hash collision cannot return a wrong prefix.
//
// Not thread-safe: used only by the engine thread.
#pragma once

#include <cstdint>
#include <list>
#include <unordered_map>
#include <vector>

#include "runtime/model_runner.h"

namespace ds {

// Blocks held by one sequence, in position order: ids[i] holds positions [64 i, 64 i + 64).
struct SeqBlocks {
  std::vector<int32_t> ids;
  int num_hashed = 0;        // leading blocks registered in (or taken from) the prefix cache
  uint64_t last_hash = 0;    // key of block num_hashed - 1 (chain parent of the next one)
};

// Result of a read-only prefix lookup.
struct PrefixMatch {
  std::vector<int32_t> block_ids;  // matched full blocks, in order
  std::vector<uint64_t> hashes;    // their keys
  int num_free = 0;                // how many of them currently have ref_count 0
  int num_tokens() const { return static_cast<int>(block_ids.size()) * kBlockSize; }
};

class BlockManager {
 public:
  BlockManager(int num_blocks, bool enable_prefix_caching);

  int num_blocks() const { return num_blocks_; }
  // Blocks with ref_count 0 (never-cached free blocks plus evictable cached ones).
  int num_free_blocks() const { return static_cast<int>(free_plain_.size() + evictable_.size()); }
  int num_used_blocks() const { return num_blocks_ - num_free_blocks(); }
  int num_cached_blocks() const { return static_cast<int>(by_hash_.size()); }
  bool prefix_caching() const { return prefix_caching_; }

  // Longest run of cached full blocks equal to tokens[0 : max_tokens] (rounded down to whole
  // blocks). Read-only. Empty when prefix caching is off.
  PrefixMatch Match(const std::vector<int32_t>& tokens, int max_tokens) const;

  // Gives `seq` (which must hold no blocks) the matched blocks (ref_count + 1 each; free ones
  // leave the evictable list). Also counts a prefix-cache query of `query_tokens` tokens with
  // match.num_tokens() hits.
  void TakePrefix(SeqBlocks* seq, const PrefixMatch& match, int query_tokens);

  // Appends fresh blocks until `seq` covers `num_tokens` positions. All or nothing: returns
  // false (and allocates nothing) if the pool cannot supply them.
  bool Grow(SeqBlocks* seq, int num_tokens);

  // Registers the keys of the full blocks among the first `num_computed` tokens of `tokens`
  // that are not registered yet (their KV is written). No-op without prefix caching.
  void CommitFullBlocks(SeqBlocks* seq, const std::vector<int32_t>& tokens, int num_computed);

  // Drops the sequence's references (last block first into the LRU, so tails evict first).
  void Free(SeqBlocks* seq);

  // Counters (tokens): prefix-cache queries and hits since construction.
  int64_t prefix_query_tokens() const { return query_tokens_; }
  int64_t prefix_hit_tokens() const { return hit_tokens_; }
  int64_t num_evictions() const { return evictions_; }

  // Checks every internal invariant (ref counts vs. free lists vs. hash map); DS_CHECK fails
  // on violation. For tests and debug builds.
  void CheckInvariants() const;

  static uint64_t HashBlock(uint64_t parent, const int32_t* tokens, int n);

 private:
  struct Block {
    int ref_count = 0;
    bool hashed = false;
    uint64_t hash = 0;
    uint64_t parent = 0;
    std::vector<int32_t> tokens;          // the block's tokens when hashed (collision check)
    std::list<int32_t>::iterator lru_it;  // valid when hashed && ref_count == 0
  };
  int32_t AllocateOne();  // -1 if none
  void Release(int32_t id);

  int num_blocks_;
  bool prefix_caching_;
  std::vector<Block> blocks_;
  std::vector<int32_t> free_plain_;   // ref 0, not hashed (stack)
  std::list<int32_t> evictable_;      // ref 0, hashed; front = least recently freed
  std::unordered_map<uint64_t, int32_t> by_hash_;
  int64_t query_tokens_ = 0, hit_tokens_ = 0, evictions_ = 0;
};

}  // namespace ds
