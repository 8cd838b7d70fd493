#include "cli/complete.hpp"

#include "cli/help.hpp"
#include "manifest/manifests.hpp"

#include <algorithm>

namespace hpcbake::cli {

namespace {

const CLI::Option* find_option(CLI::App* at, const std::string& word) {
  const std::string name = word.substr(0, word.find('='));
  for (CLI::App* a = at; a; a = a->get_parent())
    for (const auto* opt : a->get_options())
      if (!opt->get_positional() && opt->check_name(name)) return opt;
  return nullptr;
}

CLI::App* find_command(CLI::App* at, const std::string& word) {
  for (auto* sub : at->get_subcommands([](CLI::App*) { return true; }))
    if (sub->get_name() == word) return sub;
  return nullptr;
}

bool takes_value(const CLI::Option* opt) {
  return opt && opt->get_expected_max() != 0;
}

// The manifest directory the line names (--manifests DIR), else the default.
std::string manifests_named(const std::vector<std::string>& words) {
  for (std::size_t i = 0; i + 1 < words.size(); ++i) {
    if (words[i] == "--manifests") return words[i + 1];
    if (words[i].starts_with("--manifests=")) return words[i].substr(12);
  }
  return {};
}

std::vector<std::string> values_of(const CLI::Option& opt, const std::vector<std::string>& words) {
  if (auto v = option_values(opt); !v.empty()) return v;
  const std::string name = opt.get_lnames().empty() ? std::string() : opt.get_lnames().front();
  if (name != "size" && name != "distro" && name != "profile") return {};
  auto m = manifest::load_manifests(manifest::manifest_dir_or_default(manifests_named(words)));
  if (!m) return {};
  std::vector<std::string> out;
  if (name == "size")
    for (const auto& s : m->sizes) {
      out.push_back(s.size);                                                // Standard_ND96isr_H100_v5
      if (s.size.starts_with("Standard_")) out.push_back(s.size.substr(9)); // ND96isr_H100_v5
    }
  if (name == "distro")
    for (const auto& d : m->distros)
      out.push_back(d.id);
  if (name == "profile")
    for (const auto& p : m->profiles)
      out.push_back(p.id);
  return out;
}

std::vector<std::string> options_of(CLI::App* at) {
  std::vector<std::string> out;
  for (CLI::App* a = at; a; a = a->get_parent())
    for (const auto* opt : a->get_options())
      if (!opt->get_positional())
        for (const auto& l : opt->get_lnames())
          if (std::find(out.begin(), out.end(), "--" + l) == out.end()) out.push_back("--" + l);
  return out;
}

} // namespace

std::vector<std::string> complete_words(CLI::App& app, const std::vector<std::string>& words) {
  if (words.empty()) return {};
  CLI::App* at = &app;
  const CLI::Option* pending = nullptr; // an option whose value comes next
  for (std::size_t i = 0; i + 1 < words.size(); ++i) {
    const std::string& w = words[i];
    if (pending) {
      if (w != "=") pending = nullptr; // "=" keeps waiting for the value after it
      continue;
    }
    if (w.starts_with("-")) {
      const auto* opt = find_option(at, w);
      if (takes_value(opt) && w.find('=') == std::string::npos) pending = opt;
      continue;
    }
    if (auto* sub = find_command(at, w)) at = sub;
  }
  const std::string& cur = words.back();
  if (pending) return values_of(*pending, words);
  if (cur.starts_with("--") && cur.find('=') != std::string::npos) { // --reboot=a, in one word
    const auto* opt = find_option(at, cur);
    if (!takes_value(opt)) return {};
    std::vector<std::string> out;
    for (const auto& v : values_of(*opt, words))
      out.push_back(cur.substr(0, cur.find('=') + 1) + v);
    return out;
  }
  if (cur.starts_with("-")) return options_of(at);
  std::vector<std::string> out;
  for (auto* sub : at->get_subcommands([](CLI::App*) { return true; }))
    out.push_back(sub->get_name());
  return out; // no command here: a positional, which the shell completes as a file
}

} // namespace hpcbake::cli
