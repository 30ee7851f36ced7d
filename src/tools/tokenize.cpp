// `dsinfer tokenize`, `dsinfer detokenize` and `dsinfer chat-template`: the tokenizer from
// the command line (JSON output; used by tests and by scripts comparing with HF tokenizers).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/chat_template.h"
#include "server/tokenizer.h"
#include "tools/command.h"

namespace {

using json = nlohmann::json;

std::unique_ptr<ds::Tokenizer> LoadOrExit(const std::string& dir) {
  auto t = ds::Tokenizer::Load(dir);
  if (!t.ok()) {
    std::fprintf(stderr, "dsinfer: %s\n", t.status().ToString().c_str());
    return nullptr;
  }
  return std::move(t).value();
}

// JSON dump that never throws on invalid UTF-8 (it is replaced by U+FFFD).
std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

int RunTokenize(int argc, char** argv) {
  CLI::App app{"Tokenize text with a model directory's tokenizer (prints {\"ids\": [...]})"};
  std::string dir, text, input, output = "json";
  bool add_special = false, no_parse_special = false;
  app.add_option("--tokenizer,--model", dir, "directory with tokenizer.json (+ tokenizer_config.json)")->required();
  auto* t = app.add_option("--text", text, "the text to tokenize");
  auto* in = app.add_option("--input-jsonl", input, "file of {\"text\": ...} lines; one {\"ids\": [...]} line out per line");
  t->excludes(in);
  app.add_flag("--add-special-tokens", add_special, "add BOS/EOS as tokenizer_config.json says");
  app.add_flag("--no-parse-special", no_parse_special, "treat special tokens written in the text as plain text");
  app.add_option("--output", output, "output format")->check(CLI::IsMember({"json"}));
  CLI11_PARSE(app, argc, argv);
  if (!t->count() && !in->count()) {
    std::fprintf(stderr, "dsinfer tokenize: one of --text or --input-jsonl is required\n");
    return 2;
  }
  auto tok = LoadOrExit(dir);
  if (!tok) return 1;
  if (t->count()) {
    auto ids = tok->Encode(text, add_special, !no_parse_special);
    std::printf("%s\n", Dump(json{{"ids", ids}}).c_str());
    return 0;
  }
  std::ifstream f(input, std::ios::binary);
  if (!f) {
    std::fprintf(stderr, "dsinfer tokenize: cannot open %s\n", input.c_str());
    return 1;
  }
  std::string line;
  size_t lineno = 0;
  std::string out;
  while (std::getline(f, line)) {
    ++lineno;
    json j;
    try {
      j = json::parse(line);
    } catch (const json::exception& e) {
      std::fprintf(stderr, "dsinfer tokenize: %s:%zu: bad JSON: %s\n", input.c_str(), lineno, e.what());
      return 1;
    }
    if (!j.is_object() || !j.contains("text") || !j["text"].is_string()) {
      std::fprintf(stderr, "dsinfer tokenize: %s:%zu: expected {\"text\": string}\n", input.c_str(), lineno);
      return 1;
    }
    auto ids = tok->Encode(j["text"].get<std::string>(), add_special, !no_parse_special);
    out = Dump(json{{"ids", ids}});
    out.push_back('\n');
    std::fwrite(out.data(), 1, out.size(), stdout);
  }
  return 0;
}

// The first id outside [0, vocab_size) (Decode would drop it silently), if any.
std::optional<long long> FirstIdOutside(const std::vector<long long>& ids, int32_t vocab_size) {
  for (long long id : ids)
    if (id < 0 || id >= vocab_size) return id;
  return std::nullopt;
}

bool ParseIds(const std::string& s, std::vector<long long>* ids) {
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    try {
      size_t pos = 0;
      long long v = std::stoll(item, &pos);
      if (pos != item.size()) return false;
      ids->push_back(v);
    } catch (...) {
      return false;
    }
  }
  return true;
}

int RunDetokenize(int argc, char** argv) {
  CLI::App app{"Decode token ids to text (prints {\"text\": ...})"};
  std::string dir, ids_str, input, output = "json";
  bool skip_special = false;
  app.add_option("--tokenizer,--model", dir, "directory with tokenizer.json")->required();
  auto* i = app.add_option("--ids", ids_str, "comma-separated ids, e.g. 1,2,3");
  auto* in = app.add_option("--input-jsonl", input, "file of {\"ids\": [...]} lines; one {\"text\": ...} line out per line");
  i->excludes(in);
  app.add_flag("--skip-special-tokens", skip_special, "drop special tokens");
  app.add_option("--output", output, "output format")->check(CLI::IsMember({"json"}));
  CLI11_PARSE(app, argc, argv);
  if (!i->count() && !in->count()) {
    std::fprintf(stderr, "dsinfer detokenize: one of --ids or --input-jsonl is required\n");
    return 2;
  }
  auto tok = LoadOrExit(dir);
  if (!tok) return 1;
  if (i->count()) {
    std::vector<long long> ids;
    if (!ParseIds(ids_str, &ids)) {
      std::fprintf(stderr, "dsinfer detokenize: --ids must be comma-separated integers\n");
      return 2;
    }
    if (const auto bad = FirstIdOutside(ids, tok->vocab_size())) {
      std::fprintf(stderr, "dsinfer detokenize: token id %lld is outside the vocabulary [0, %d)\n", *bad,
                   tok->vocab_size());
      return 2;
    }
    const std::vector<int32_t> ids32(ids.begin(), ids.end());
    std::printf("%s\n", Dump(json{{"text", tok->Decode(ids32, skip_special)}}).c_str());
    return 0;
  }
  std::ifstream f(input, std::ios::binary);
  if (!f) {
    std::fprintf(stderr, "dsinfer detokenize: cannot open %s\n", input.c_str());
    return 1;
  }
  std::string line;
  size_t lineno = 0;
  while (std::getline(f, line)) {
    ++lineno;
    std::vector<long long> ids;
    try {
      json j = json::parse(line);
      ids = j.at("ids").get<std::vector<long long>>();
    } catch (const json::exception& e) {
      std::fprintf(stderr, "dsinfer detokenize: %s:%zu: expected {\"ids\": [int...]}: %s\n",
                   input.c_str(), lineno, e.what());
      return 1;
    }
    if (const auto bad = FirstIdOutside(ids, tok->vocab_size())) {
      std::fprintf(stderr, "dsinfer detokenize: %s:%zu: token id %lld is outside the vocabulary [0, %d)\n",
                   input.c_str(), lineno, *bad, tok->vocab_size());
      return 1;
    }
    const std::vector<int32_t> ids32(ids.begin(), ids.end());
    std::printf("%s\n", Dump(json{{"text", tok->Decode(ids32, skip_special)}}).c_str());
  }
  return 0;
}

int RunChatTemplate(int argc, char** argv) {
  CLI::App app{"Render a conversation with the model's chat template (prints {\"text\", \"ids\"})"};
  std::string dir, messages_file, tools_file;
  bool gen = false, force_jinja = false;
  app.add_option("--tokenizer,--model", dir, "directory with tokenizer.json + tokenizer_config.json")->required();
  app.add_flag("--force-jinja", force_jinja, "render with the Jinja interpreter even for a template known natively");
  app.add_option("--messages-json", messages_file, "file with a JSON array of messages (or {\"messages\": [...], \"tools\": [...]})")->required();
  app.add_option("--tools-json", tools_file, "file with a JSON array of tools");
  app.add_flag("--add-generation-prompt", gen, "end with the assistant prefix");
  CLI11_PARSE(app, argc, argv);
  auto tok = LoadOrExit(dir);
  if (!tok) return 1;
  nlohmann::ordered_json msgs, tools;
  try {
    std::ifstream f(messages_file);
    if (!f) {
      std::fprintf(stderr, "dsinfer chat-template: cannot open %s\n", messages_file.c_str());
      return 1;
    }
    msgs = nlohmann::ordered_json::parse(f);
    if (msgs.is_object()) {
      if (msgs.contains("tools")) tools = msgs["tools"];
      msgs = msgs.at("messages");
    }
    if (!tools_file.empty()) {
      std::ifstream tf(tools_file);
      tools = nlohmann::ordered_json::parse(tf);
    }
  } catch (const json::exception& e) {
    std::fprintf(stderr, "dsinfer chat-template: bad JSON: %s\n", e.what());
    return 1;
  }
  auto ct = force_jinja ? ds::ChatTemplate::FromString(tok->chat_template(), tok->bos_token(), tok->eos_token(), true)
                        : ds::ChatTemplate::FromTokenizer(*tok);
  if (!ct.ok()) {
    std::fprintf(stderr, "dsinfer chat-template: %s\n", ct.status().ToString().c_str());
    return 1;
  }
  auto text = (*ct)->Apply(msgs, gen, tools);
  if (!text.ok()) {
    std::fprintf(stderr, "dsinfer chat-template: %s\n", text.status().ToString().c_str());
    return 1;
  }
  auto ids = tok->Encode(*text, /*add_special_tokens=*/false);
  std::printf("%s\n", Dump(json{{"text", *text}, {"ids", ids}}).c_str());
  return 0;
}

}  // namespace

DS_REGISTER_COMMAND(tokenize, "tokenize text with a model's tokenizer (JSON ids)", RunTokenize);
DS_REGISTER_COMMAND(detokenize, "decode token ids to text (JSON)", RunDetokenize);
static ::ds::tools::CommandRegistrar ds_command_registrar_chat_template(
    "chat-template", "render messages with the model's chat template (text + ids)", RunChatTemplate);
