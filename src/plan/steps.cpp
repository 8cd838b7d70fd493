// The typed steps as JSON: what `plan --json` shows and what the install journal's digests
// cover. Every field an executor reads is here, so any change to it re-runs the step.
#include "container/cdi_rdma.hpp"
#include "plan/plan.hpp"
#include "util/overload.hpp"
#include "util/strings.hpp"
#include "util/url.hpp"

#include <fmt/format.h>

#include <map>

namespace hpcbake::plan {

using nlohmann::json;

namespace {

constexpr std::string_view kRefPrefix = "{artifact:";

std::string mode_text(unsigned mode) {
  std::string out = "0";
  for (int shift = 6; shift >= 0; shift -= 3)
    out += static_cast<char>('0' + ((mode >> shift) & 7));
  return out;
}

json opt(const std::optional<std::string>& v) {
  return v ? json(*v) : json(nullptr);
}

json signing_json(const driver::SigningPlan& s) {
  if (!s.enabled) return {{"enabled", false}, {"why", s.why}};
  return {
      {"enabled", true}, {"generate", s.generate}, {"key", s.key.string()}, {"cert", s.cert.string()}, {"why", s.why}};
}

json prebuilt_json(const PrebuiltUse& p) {
  json kernels = json::array();
  for (const auto& [k, why] : p.kernels)
    kernels.push_back({{"kernel", k}, {"use", why.empty()}, {"why_not", why}});
  return {{"file", p.file}, {"sha256", p.sha256}, {"built_for", p.kernel}, {"kernels", kernels}};
}

json packages_json(const PackagesStep& s) {
  json j = {{"component", s.component}, {"version", s.version},   {"manager", manifest::to_string(s.manager)},
            {"files", s.files},         {"packages", s.packages}, {"refresh", refreshes_index(s)},
            {"hold", s.hold},           {"kernels", s.kernels},   {"repository", s.repository}};
  if (s.dkms) j["signed_by"] = to_string(*signed_by(*s.dkms));
  // Only with prebuilt modules or hpcbake's key: then install does more than the package manager.
  if (s.dkms && (s.dkms->prebuilt || s.dkms->sign))
    j["dkms"] = {{"dkms_name", s.dkms->dkms_name},
                 {"version", s.dkms->version},
                 {"modules", s.dkms->modules},
                 {"prebuilt", s.dkms->prebuilt ? prebuilt_json(*s.dkms->prebuilt) : json(nullptr)}};
  return j;
}

json dkms_build_json(const DkmsBuildStep& s) {
  json j = {{"component", s.component},
            {"version", s.version},
            {"source", s.source},
            {"dkms_name", s.dkms_name},
            {"subdir", s.subdir},
            {"modules", s.modules},
            {"kernels", s.kernels},
            {"signing", signing_json(s.signing)},
            {"signed_by", to_string(signed_by(s))},
            {"dkms_conf_template", s.dkms_conf_template}};
  if (s.prebuilt) j["prebuilt"] = prebuilt_json(*s.prebuilt);
  // Only where used, so that the plans of artifact-sourced modules read as before.
  if (!s.source_dir.empty()) j["source_dir"] = s.source_dir;
  if (!s.directives.empty()) j["directives"] = s.directives;
  return j;
}

json canonical_json(const CanonicalDriverStep& s) {
  return {{"component", s.component},
          {"branch", s.branch},
          {"module_flavour", s.flavour},
          {"kernels", s.kernels},
          {"modules_package", s.modules_package},
          {"flavour_package", s.flavour_package},
          {"packages", s.packages},
          {"hold", true},
          {"versions", "the candidates of the signed archive index, read at install"},
          {"keyring", s.keyring},
          {"fingerprints", s.fingerprints},
          {"signer", s.signer},
          {"module_signer", s.module_signer},
          {"module_signer_serials", s.signer_serials},
          {"source", s.source}};
}

// A bundle's copy of a repository: where it goes and each file with its digest (null when the
// repository is used where it is).
json mirror_json(const RepositoryStep& s) {
  if (s.mirror_dir.empty()) return nullptr;
  json files = json::array();
  for (const auto& f : s.mirror)
    files.push_back({{"path", f.path}, {"sha256", f.sha256}, {"size", f.size}});
  return {{"dir", s.mirror_dir}, {"files", std::move(files)}};
}

} // namespace

const char* to_string(SignedBy by) {
  switch (by) {
  case SignedBy::hpcbake_key:
    return "hpcbake-key";
  case SignedBy::dkms_mok:
    return "dkms-mok";
  case SignedBy::unsigned_modules:
    return "unsigned";
  }
  return "unsigned";
}

std::optional<SignedBy> signed_by_of(std::string_view name) {
  for (auto by : {SignedBy::hpcbake_key, SignedBy::dkms_mok, SignedBy::unsigned_modules})
    if (name == to_string(by)) return by;
  return std::nullopt;
}

std::optional<SignedBy> signed_by(const PackagedModules& pm) {
  return pm.sign ? SignedBy::hpcbake_key : SignedBy::dkms_mok;
}

std::string trust_mode(const RepositoryStep& r) {
  if (r.signed_metadata && r.signed_packages) return "metadata+packages";
  return r.signed_packages ? "packages" : "metadata";
}

std::string ModulesLoadStep::content() const {
  std::string out = "# Written by hpcbake: modules loaded at boot\n";
  for (const auto& m : modules)
    out += m + "\n";
  return out;
}

std::string CanonicalDriverStep::modules_for(const std::string& kernel) const {
  return util::replace_all(modules_package, "{kernel}", kernel);
}

const char* to_string(SigningRoute route) {
  switch (route) {
  case SigningRoute::none:
    return "none";
  case SigningRoute::hpcbake_key:
    return "hpcbake-key";
  case SigningRoute::canonical_signed:
    return "canonical-signed";
  }
  return "none";
}

std::optional<SigningRoute> parse_signing_route(std::string_view text) {
  for (auto r : {SigningRoute::none, SigningRoute::hpcbake_key, SigningRoute::canonical_signed})
    if (text == to_string(r)) return r;
  return std::nullopt;
}

const char* to_string(DriverSource source) {
  switch (source) {
  case DriverSource::automatic:
    return "auto";
  case DriverSource::repository:
    return "repository";
  case DriverSource::run:
    return "run";
  case DriverSource::canonical:
    return "canonical";
  }
  return "auto";
}

std::optional<DriverSource> parse_driver_source(std::string_view text) {
  for (auto d : {DriverSource::automatic, DriverSource::repository, DriverSource::run, DriverSource::canonical})
    if (text == to_string(d)) return d;
  return std::nullopt;
}

std::string artifact_ref(const std::string& name) {
  return std::string(kRefPrefix) + name + "}";
}

std::optional<std::string> artifact_of_ref(const std::string& arg) {
  if (!arg.starts_with(kRefPrefix) || !arg.ends_with('}')) return std::nullopt;
  return arg.substr(kRefPrefix.size(), arg.size() - kRefPrefix.size() - 1);
}

const char* kind_name(const Action& action) {
  return std::visit(util::Overload{
                        [](const PackagesStep&) { return "packages"; },
                        [](const RepositoryStep&) { return "repository"; },
                        [](const HeadersStep&) { return "kernel-headers"; },
                        [](const ArtifactStep&) { return "artifact"; },
                        [](const ConfigStep&) { return "config"; },
                        [](const ModulesLoadStep&) { return "modules-load"; },
                        [](const CommandStep&) { return "command"; },
                        [](const SigningKeyStep&) { return "signing-key"; },
                        [](const RunInstallerStep&) { return "run-installer"; },
                        [](const DkmsBuildStep&) { return "dkms-build"; },
                        [](const DkmsCheckStep&) { return "dkms-check"; },
                        [](const KernelHoldStep&) { return "kernel-hold"; },
                        [](const ServiceStep&) { return "service"; },
                        [](const WaagentStep&) { return "waagent"; },
                        [](const ContainerRuntimeStep&) { return "container-runtime"; },
                        [](const RebootStep&) { return "reboot"; },
                        [](const VerifyStep&) { return "verify"; },
                        [](const CanonicalDriverStep&) { return "canonical-driver"; },
                        [](const UnpackStep&) { return "unpack"; },
                        [](const GitSourceStep&) { return "git-source"; },
                        [](const BuildStep&) { return "build"; },
                    },
                    action);
}

json waagent_json(const WaagentStep& s) {
  json set = json::object();
  for (const auto& [k, v] : s.settings)
    set[k] = v;
  return {{"config", s.config},
          {"unit", s.unit},
          {"enable_rdma", s.enable},
          {"set", set},
          {"restart", "only when the file changed and the agent is active"},
          {"reason", s.reason}};
}

json unpack_json(const UnpackStep& s) {
  return {{"component", s.component},
          {"version", s.version},
          {"artifact", s.artifact},
          {"dest", s.dest},
          {"strip", s.strip}};
}

json git_source_json(const GitSourceStep& s) {
  json j = {{"component", s.component}, {"version", s.version}, {"url", s.url}, {"commit", s.commit}, {"dest", s.dest}};
  if (s.bundle) j["bundle"] = {{"file", s.bundle->path}, {"sha256", s.bundle->sha256}, {"size", s.bundle->size}};
  return j;
}

json build_json(const BuildStep& s) {
  return {{"component", s.component}, {"version", s.version}, {"dir", s.dir}, {"env", s.env},
          {"commands", s.commands},   {"creates", s.creates}};
}

json repository_json(const RepositoryStep& s) {
  return {{"repository", s.repository},
          {"manager", manifest::to_string(s.manager)},
          {"uri", s.uri},
          {"key_urls", s.key_urls},
          {"fingerprint", s.fingerprint},
          {"key_path", s.key_path},
          {"source_path", s.source_path},
          {"source", s.source},
          {"suite", s.suite},
          {"components", s.components},
          {"mirror", mirror_json(s)},
          {"signed_metadata", s.signed_metadata},
          {"signed_packages", s.signed_packages},
          {"trust", trust_mode(s)},
          {"trust_source", s.trust_source}};
}

json container_runtime_json(const ContainerRuntimeStep& s) {
  json engines = json::object();
  for (const auto& [engine, config] : s.engines)
    engines[engine] = config;
  json j = {{"engines", engines},
            {"runtime", s.runtime},
            {"binary", s.binary},
            {"restart", "only an engine that runs, and only when its file changed"}};
  if (s.kubernetes) j["kubernetes"] = {{"containerd_default_runtime", s.runtime}, {"enable_cdi", true}};
  if (s.rdma)
    j["rdma"] = {{"docker_memlock", "unlimited"},
                 {"cdi_spec", container::kRdmaCdiSpec},
                 {"cdi_refresh", "verify --boot, at every boot"}};
  return j;
}

json Step::detail() const {
  return std::visit(util::Overload{
                        [](const PackagesStep& s) -> json { return packages_json(s); },
                        [](const RepositoryStep& s) { return repository_json(s); },
                        [](const HeadersStep& s) -> json {
                          return {{"manager", manifest::to_string(s.manager)},
                                  {"kernel", s.kernel},
                                  {"package", s.package},
                                  {"check", s.check}};
                        },
                        [](const ArtifactStep& s) -> json {
                          return {{"component", s.component}, {"version", s.version},
                                  {"name", s.name},           {"urls", s.urls},
                                  {"sha256", opt(s.sha256)},  {"size", s.size ? json(*s.size) : json(nullptr)}};
                        },
                        [](const ConfigStep& s) -> json {
                          return {{"path", s.path}, {"content", s.content}, {"mode", mode_text(s.mode)}};
                        },
                        [](const ModulesLoadStep& s) -> json {
                          return {{"path", s.path}, {"modules", s.modules}, {"content", s.content()}};
                        },
                        [](const CommandStep& s) -> json {
                          json j = {{"purpose", s.purpose}, {"kernel", s.kernel}, {"argv", s.argv}};
                          if (!s.initramfs.empty()) {
                            j["initramfs"] = s.initramfs;
                            j["only_if_holds"] = s.only_if_holds;
                          }
                          return j;
                        },
                        [](const KernelHoldStep& s) -> json {
                          return {{"packages", s.packages}, {"kernels", s.kernels}, {"source", s.source}};
                        },
                        [](const SigningKeyStep& s) -> json {
                          return {{"signing", signing_json(s.signing)}};
                        },
                        [](const RunInstallerStep& s) -> json {
                          json cmds = json::array();
                          for (const auto& [k, argv] : s.commands)
                            cmds.push_back({{"kernel", k}, {"argv", argv}});
                          return {
                              {"component", s.component},           {"recipe", s.recipe},     {"version", s.version},
                              {"module_flavour", s.flavour},        {"run_file", s.run_file}, {"commands", cmds},
                              {"signed_by", to_string(s.signed_by)}};
                        },
                        [](const DkmsBuildStep& s) { return dkms_build_json(s); },
                        [](const DkmsCheckStep& s) -> json {
                          return {{"package", s.package},
                                  {"version", s.version},
                                  {"kernel", s.kernel},
                                  {"modules", s.modules},
                                  {"check_signer", s.check_signer}};
                        },
                        [](const ServiceStep& s) -> json {
                          return {{"unit", s.unit}, {"argv", s.argv}};
                        },
                        [](const WaagentStep& s) { return waagent_json(s); },
                        [](const ContainerRuntimeStep& s) { return container_runtime_json(s); },
                        [](const RebootStep& s) -> json {
                          return {{"reason", s.reason}};
                        },
                        [](const UnpackStep& s) { return unpack_json(s); },
                        [](const GitSourceStep& s) { return git_source_json(s); },
                        [](const BuildStep& s) { return build_json(s); },
                        [](const VerifyStep& s) -> json {
                          json j = {{"checks", to_json(s.expect)}, {"thresholds_source", s.thresholds_source}};
                          if (s.defer_hardware) j["hardware_checks"] = "deferred";
                          return j;
                        },
                        [](const CanonicalDriverStep& s) { return canonical_json(s); },
                    },
                    action);
}

namespace {

// Prose in a step's JSON, by kind: sentences for people and where a value came from. Not part of
// what the step does, so not part of its digest.
void drop_prose(json& j, const char* kind) {
  static const std::map<std::string, std::vector<const char*>> prose = {
      {"waagent", {"restart", "reason"}},
      {"container-runtime", {"restart"}},
      {"reboot", {"reason"}},
      {"kernel-hold", {"source"}},
      {"repository", {"trust_source"}},
      {"verify", {"thresholds_source"}},
      {"canonical-driver", {"signer", "source", "versions"}},
  };
  if (auto it = prose.find(kind); it != prose.end())
    for (const char* key : it->second)
      j.erase(key);
  // Signing's "why" and a prebuilt offer's "why_not" are sentences; what they decide is beside them.
  const auto strip_signing = [](json& sig) {
    if (sig.is_object()) sig.erase("why");
  };
  const auto strip_prebuilt = [](json& pre) {
    if (!pre.is_object() || !pre.contains("kernels")) return;
    for (auto& k : pre["kernels"])
      k.erase("why_not");
  };
  if (j.contains("signing")) strip_signing(j["signing"]);
  if (j.contains("prebuilt")) strip_prebuilt(j["prebuilt"]);
  if (j.contains("dkms") && j["dkms"].is_object() && j["dkms"].contains("prebuilt"))
    strip_prebuilt(j["dkms"]["prebuilt"]);
  if (j.contains("checks") && j["checks"].is_object())
    for (const char* key : {"size_file", "driver_source", "ib_write_bw_source"})
      j["checks"].erase(key);
}

} // namespace

json Step::content() const {
  json j = detail();
  drop_prose(j, kind());
  return j;
}

std::optional<ComponentRef> component_of(const Step& step) {
  if (const auto* a = step.as<ArtifactStep>()) return ComponentRef{a->component, a->version};
  if (const auto* p = step.as<PackagesStep>(); p && !p->component.empty())
    return ComponentRef{p->component, p->version};
  if (const auto* r = step.as<RunInstallerStep>()) return ComponentRef{r->component, r->version};
  if (const auto* d = step.as<DkmsBuildStep>()) return ComponentRef{d->component, d->version};
  if (const auto* u = step.as<UnpackStep>()) return ComponentRef{u->component, u->version};
  if (const auto* g = step.as<GitSourceStep>()) return ComponentRef{g->component, g->version};
  if (const auto* b = step.as<BuildStep>()) return ComponentRef{b->component, b->version};
  return std::nullopt;
}

const Step* Plan::find(const std::string& id) const {
  for (const auto& s : steps)
    if (s.id == id) return &s;
  return nullptr;
}

} // namespace hpcbake::plan

namespace hpcbake::plan {

bool is_local_url(std::string_view url) {
  return url.starts_with("file://");
}

Status offline_installable(const Plan& plan) {
  std::vector<std::string> names, sources;
  for (const auto& s : plan.steps) {
    if (const auto* g = s.as<GitSourceStep>(); g && !g->bundle && !is_local_url(g->url))
      sources.push_back(fmt::format("{} ({} at {})", g->component, util::redact_url(g->url), g->commit));
    const auto* r = s.as<RepositoryStep>();
    if (!r) continue;
    if (!is_local_url(r->uri))
      names.push_back(fmt::format("{} ({})", r->repository, util::redact_url(r->uri)));
    else if (std::none_of(r->key_urls.begin(), r->key_urls.end(), [](const auto& u) { return is_local_url(u); }))
      names.push_back(fmt::format("{} (its key, {})", r->repository,
                                  util::redact_url(r->key_urls.empty() ? std::string("none") : r->key_urls.front())));
  }
  if (names.empty() && sources.empty()) return {};
  std::vector<std::string> what;
  if (!names.empty()) what.push_back("installs packages from " + util::join(names, ", "));
  if (!sources.empty()) what.push_back("clones the git source of " + util::join(sources, ", "));
  return fail(ErrorKind::unsupported,
              fmt::format("{} on {} {}, which the bundle does not carry, so an install from it would stop there",
                          plan.size, plan.distro_id, util::join(what, " and ")),
              "make the bundle again for this size and distro ('bundle create' without --all carries the "
              "repositories and git sources a plan uses), or mirror the repository onto the machine's disk and "
              "point its manifest at it (uri: file:///DIR/, key urls: [file:///PATH]); the signature checks stay "
              "the same");
}

Status bundle_can_carry(const Plan& plan) {
  std::vector<std::string> names;
  for (const auto& s : plan.steps)
    if (const auto* r = s.as<RepositoryStep>();
        r && is_local_url(r->uri) &&
        std::none_of(r->key_urls.begin(), r->key_urls.end(), [](const auto& u) { return is_local_url(u); }))
      names.push_back(fmt::format("{} (its key, {})", r->repository,
                                  util::redact_url(r->key_urls.empty() ? std::string("none") : r->key_urls.front())));
  if (names.empty()) return {};
  return fail(ErrorKind::unsupported,
              fmt::format("{} on {} trusts {} from the network, so an install from the bundle would stop there",
                          plan.size, plan.distro_id, util::join(names, ", ")),
              "put the key beside the repository on the machine's disk and name it in the manifest (key urls: "
              "[file:///PATH])");
}

} // namespace hpcbake::plan
