#include "bench/request.h"

namespace ds::bench {

StatusOr<Backend> ParseBackend(const std::string& name) {
  if (name == "openai" || name == "completions" || name == "openai-completions") return Backend::kCompletions;
  if (name == "openai-chat" || name == "chat") return Backend::kChat;
  return InvalidArgument("unknown --backend '" + name + "' (openai | openai-chat)");
}

StatusOr<std::string> BuildRequestBody(const RequestBodyOptions& opt, const BenchRequest& r,
                                       uint64_t index) {
  nlohmann::json body;
  body["model"] = opt.model;
  bool want_text = opt.backend == Backend::kChat || opt.text_prompts;
  std::string text;
  std::vector<int32_t> ids;
  if (!r.prompt_text.empty()) {
    text = r.prompt_text;
  } else {
    ids = MaterializePrompt(r, opt.range, opt.seed, index);
    if (want_text) {
      if (!opt.codec)
        return InvalidArgument(
            "this dataset makes token-id prompts; the chat endpoint (or text prompts) needs "
            "--tokenizer DIR to turn them into text");
      text = opt.codec->Decode(ids);
    }
  }
  if (opt.backend == Backend::kChat) {
    body["messages"] = nlohmann::json::array({{{"role", "user"}, {"content", text}}});
  } else if (!text.empty() || want_text) {
    body["prompt"] = text;
  } else {
    body["prompt"] = ids;
  }
  body["max_tokens"] = r.output_len;
  body["temperature"] = opt.temperature;
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  if (opt.ignore_eos) {
    body["ignore_eos"] = true;
    body["min_tokens"] = r.output_len;
  }
  if (opt.extra_body.is_object())
    for (auto it = opt.extra_body.begin(); it != opt.extra_body.end(); ++it) body[it.key()] = it.value();
  return body.dump();
}

}  // namespace ds::bench
