#include "driver/recipe.hpp"

#include "util/strings.hpp"

#include <fmt/format.h>

#include <map>

namespace hpcbake::driver {

namespace {

std::string substitute(std::string s, const std::map<std::string, std::string>& vars) {
  for (const auto& [k, v] : vars)
    s = util::replace_all(std::move(s), "{" + k + "}", v);
  return s;
}

} // namespace

Result<std::vector<std::string>> run_installer_argv(const manifest::Recipe& recipe, const RunRequest& q) {
  if (!recipe.run)
    return fail(ErrorKind::usage, fmt::format("driver kind {} is not installed from a .run file ({})",
                                              manifest::to_string(recipe.kind), recipe.file));
  const auto& run = *recipe.run;
  auto flav = run.flavour_args.find(q.flavour);
  if (flav == run.flavour_args.end())
    return fail(ErrorKind::unsupported,
                fmt::format("{} does not offer the '{}' kernel modules ({})", manifest::to_string(recipe.kind),
                            q.flavour, recipe.file),
                "use the flavour the VM size's manifest names (driver.module_flavour)");
  if (q.signing_key.empty() != q.signing_cert.empty())
    return fail(ErrorKind::usage, "a signing key needs its certificate, and the other way round");
  const std::map<std::string, std::string> vars = {
      {"kernel", q.kernel}, {"key", q.signing_key.string()}, {"cert", q.signing_cert.string()}};
  std::vector<std::string> argv = {"sh", q.run_file};
  for (const auto& a : run.args)
    argv.push_back(substitute(a, vars));
  for (const auto& a : flav->second)
    argv.push_back(substitute(a, vars));
  for (const auto& a : run.kernel_args)
    argv.push_back(substitute(a, vars));
  if (!q.signing_key.empty())
    for (const auto& a : run.signing_args)
      argv.push_back(substitute(a, vars));
  return argv;
}

} // namespace hpcbake::driver
