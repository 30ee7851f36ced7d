// TextCodec over dsinfer's tokenizer (src/server/tokenizer*.h).
#include "bench/serve_bench.h"

namespace ds::bench {

StatusOr<std::unique_ptr<TextCodec>> LoadTextCodec(const std::string& dir) {
  return Unimplemented("--tokenizer: dsinfer's tokenizer is not in this build yet ('" + dir +
                       "'); use token-id prompts (the default for random and trace datasets)");
}

}  // namespace ds::bench
