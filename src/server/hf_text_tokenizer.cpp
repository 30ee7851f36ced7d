// LoadTextTokenizer: the TextTokenizer adapter over the Hugging Face tokenizer
// (server/tokenizer.h). Until that tokenizer is in the tree, loading reports UNIMPLEMENTED.
#include "server/text_tokenizer.h"

namespace ds {

StatusOr<std::unique_ptr<TextTokenizer>> LoadTextTokenizer(const std::string& dir) {
  return Unimplemented("tokenizer loading is not available in this build yet (" + dir + ")");
}

}  // namespace ds
