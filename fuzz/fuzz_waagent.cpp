// /etc/waagent.conf: the agent's reading of it (waagent::effective_value, with Python's
// whitespace rules and strict UTF-8) and hpcbake's in-place edit of the RDMA keys (waagent::plan_edit). Properties:
// after the edit the agent reads every setting as satisfied, and editing the edited text again changes nothing
// (`rdma enable` twice must be a no-op the second time).
#include "fuzz_util.hpp"
#include "waagent/config.hpp"
#include "waagent/rdma.hpp"

using namespace hpcbake_fuzz;
namespace wa = hpcbake::waagent;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto text = as_text(data, size);
  // Python's strip(): idempotent, and nothing it removes is left at either end.
  const auto stripped = wa::python_strip(text);
  check(wa::python_strip(stripped) == stripped, "python_strip is not idempotent");
  check(wa::space_at(stripped, 0) == 0 && wa::space_before(stripped, stripped.size()) == 0,
        "python_strip left whitespace at an end");
  if (const auto u = wa::undecodable(text)) check(u->offset < size, "an undecodable byte past the end");
  for (const char* key : {wa::kEnableRdma, wa::kUpdateRdmaDriver, wa::kCheckRdmaDriver, "Provisioning.Agent"})
    (void)wa::effective_value(text, key);
  for (const auto mode : {wa::RdmaMode::on, wa::RdmaMode::off}) {
    const auto settings = wa::rdma_settings(mode);
    const auto edit = wa::plan_edit(text, settings);
    check(edit.edits.empty() == (edit.text == text), "edits reported but the text is unchanged, or the reverse");
    for (const auto& s : settings)
      check(wa::satisfied(edit.text, s), std::string("after the edit the agent does not read ") + s.key + " as " +
                                             s.value + " (mode " + wa::mode_name(mode) + ")");
    const auto again = wa::plan_edit(edit.text, settings);
    check(again.edits.empty() && again.text == edit.text, "editing an edited file changed it again");
  }
  return 0;
}
