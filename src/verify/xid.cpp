#include "verify/xid.hpp"

#include <algorithm>
#include <array>
#include <charconv>

namespace hpcbake::verify {

namespace {

// The "Xids" table of kXidCatalogueUrl, in its order: code, mnemonic, description, immediate-action
// bucket (transcribed; the bucket's action class per the page's "Guidance Classes").
constexpr XidEntry kCatalogue[] = {
    {1, "ROBUST_CHANNEL_FIFO_ERROR_FIFO_METHOD", "Unused", "CONTACT_SUPPORT", XidAction::report},
    {2, "ROBUST_CHANNEL_FIFO_ERROR_SW_METHOD", "Unused", "CONTACT_SUPPORT", XidAction::report},
    {3, "ROBUST_CHANNEL_FIFO_ERROR_UNK_METHOD", "Unused", "CONTACT_SUPPORT", XidAction::report},
    {4, "ROBUST_CHANNEL_FIFO_ERROR_CHANNEL_BUSY", "Unused", "CONTACT_SUPPORT", XidAction::report},
    {5, "ROBUST_CHANNEL_FIFO_ERROR_RUNOUT_OVERFLOW", "Unused", "CONTACT_SUPPORT", XidAction::report},
    {6, "ROBUST_CHANNEL_FIFO_ERROR_PARSE_ERR", "Unused", "CONTACT_SUPPORT", XidAction::report},
    {7, "ROBUST_CHANNEL_FIFO_ERROR_PTE_ERR", "Unused", "CONTACT_SUPPORT", XidAction::report},
    {8, "ROBUST_CHANNEL_FIFO_ERROR_IDLE_TIMEOUT", "GPU stopped processing", "RESTART_APP", XidAction::restart_app},
    {9, "ROBUST_CHANNEL_GR_ERROR_INSTANCE", "Unused", "CONTACT_SUPPORT", XidAction::report},
    {10, "ROBUST_CHANNEL_GR_ERROR_SINGLE_STEP", "Unused", "CONTACT_SUPPORT", XidAction::report},
    {11, "ROBUST_CHANNEL_GR_ERROR_MISSING_HW", "Invalid or corrupted push buffer stream", "RESTART_APP",
     XidAction::restart_app},
    {12, "ROBUST_CHANNEL_GR_ERROR_SW_METHOD", "Unused", "CONTACT_SUPPORT", XidAction::report},
    {13, "ROBUST_CHANNEL_GR_EXCEPTION / ROBUST_CHANNEL_GR_ERROR_SW_NOTIFY", "Graphics Engine Exception", "RESTART_APP",
     XidAction::restart_app},
    {14, "ROBUST_CHANNEL_FAKE_ERROR", "Unused", "IGNORE", XidAction::none},
    {15, "ROBUST_CHANNEL_SCANLINE_TIMEOUT", "Unused", "CONTACT_SUPPORT", XidAction::report},
    {16, "ROBUST_CHANNEL_VBLANK_CALLBACK_TIMEOUT", "Unused", "CONTACT_SUPPORT", XidAction::report},
    {17, "ROBUST_CHANNEL_PARAMETER_ERROR", "Unused", "CONTACT_SUPPORT", XidAction::report},
    {18, "ROBUST_CHANNEL_BUS_MASTER_TIMEOUT_ERROR", "Unused", "CONTACT_SUPPORT", XidAction::report},
    {19, "ROBUST_CHANNEL_DISP_MISSED_NOTIFIER", "Unused", "CONTACT_SUPPORT", XidAction::report},
    {20, "ROBUST_CHANNEL_MPEG_ERROR_SW_METHOD", "Unused", "CONTACT_SUPPORT", XidAction::report},
    {21, "ROBUST_CHANNEL_ME_ERROR_SW_METHOD", "Unused", "CONTACT_SUPPORT", XidAction::report},
    {22, "ROBUST_CHANNEL_VP_ERROR_SW_METHOD", "Unused", "CONTACT_SUPPORT", XidAction::report},
    {23, "ROBUST_CHANNEL_RC_LOGGING_ENABLED", "Unused", "CONTACT_SUPPORT", XidAction::report},
    {24, "ROBUST_CHANNEL_GR_SEMAPHORE_TIMEOUT", "Unused", "CONTACT_SUPPORT", XidAction::report},
    {25, "ROBUST_CHANNEL_GR_ILLEGAL_NOTIFY", "Invalid or illegal push buffer stream", "RESTART_APP",
     XidAction::restart_app},
    {26, "ROBUST_CHANNEL_FIFO_ERROR_FBISTATE_TIMEOUT", "Unused", "CONTACT_SUPPORT", XidAction::report},
    {27, "ROBUST_CHANNEL_VP_ERROR", "Unused", "CONTACT_SUPPORT", XidAction::report},
    {28, "ROBUST_CHANNEL_VP2_ERROR", "Unused", "CONTACT_SUPPORT", XidAction::report},
    {29, "ROBUST_CHANNEL_BSP_ERROR", "Unused", "CONTACT_SUPPORT", XidAction::report},
    {30, "ROBUST_CHANNEL_BAD_ADDR_ACCESS", "Unused", "CONTACT_SUPPORT", XidAction::report},
    {31, "ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT", "GPU memory page fault", "RESTART_APP", XidAction::restart_app},
    {32, "ROBUST_CHANNEL_PBDMA_ERROR", "Invalid or corrupted push buffer stream", "RESTART_APP",
     XidAction::restart_app},
    {33, "ROBUST_CHANNEL_SEC_ERROR", "Unused", "CONTACT_SUPPORT", XidAction::report},
    {34, "ROBUST_CHANNEL_MSVLD_ERROR", "Unused", "CONTACT_SUPPORT", XidAction::report},
    {35, "ROBUST_CHANNEL_MSPDEC_ERROR", "Unused", "CONTACT_SUPPORT", XidAction::report},
    {36, "ROBUST_CHANNEL_MSPPP_ERROR", "Unused", "CONTACT_SUPPORT", XidAction::report},
    {37, "ROBUST_CHANNEL_FECS_ERR_UNIMP_FIRMWARE_METHOD", "Driver firmware error", "IGNORE", XidAction::none},
    {38, "ROBUST_CHANNEL_FECS_ERR_WATCHDOG_TIMEOUT", "Driver firmware error", "IGNORE", XidAction::none},
    {39, "ROBUST_CHANNEL_CE0_ERROR", "Copy Engine Exception", "RESTART_APP", XidAction::restart_app},
    {40, "ROBUST_CHANNEL_CE1_ERROR", "Copy Engine Exception", "RESTART_APP", XidAction::restart_app},
    {41, "ROBUST_CHANNEL_CE2_ERROR", "Copy Engine Exception", "RESTART_APP", XidAction::restart_app},
    {42, "ROBUST_CHANNEL_VIC_ERROR", "Unused", "CONTACT_SUPPORT", XidAction::report},
    {43, "ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR", "GPU stopped processing", "IGNORE", XidAction::none},
    {44, "ROBUST_CHANNEL_GR_FAULT_DURING_CTXSW", "Graphics Engine fault during context switch", "IGNORE",
     XidAction::none},
    {45, "ROBUST_CHANNEL_PREEMPTIVE_REMOVAL",
     "Preemptive cleanup, due to previous errors - Most likely to see when running multiple cuda applications and "
     "hitting a DBE",
     "WORKFLOW_XID_45", XidAction::workflow},
    {46, "ROBUST_CHANNEL_GPU_TIMEOUT_ERROR", "GPU stopped processing", "RESET_GPU", XidAction::reset_gpu},
    {47, "ROBUST_CHANNEL_NVENC0_ERROR", "Unused", "CONTACT_SUPPORT", XidAction::report},
    {48, "ROBUST_CHANNEL_GPU_ECC_DBE", "Double Bit ECC Error", "WORKFLOW_XID_48", XidAction::workflow},
    {49, "SILENT_RUNNING_CONSTANT_LEVEL_SET_BY_REGISTRY", "Unused", "CONTACT_SUPPORT", XidAction::report},
    {50, "SILENT_RUNNING_LEVEL_TRANSITION_DUE_TO_RC_ERROR", "Unused", "CONTACT_SUPPORT", XidAction::report},
    {51, "SILENT_RUNNING_STRESS_TEST_FAILURE", "Unused", "CONTACT_SUPPORT", XidAction::report},
    {52, "SILENT_RUNNING_LEVEL_TRANS_DUE_TO_TEMP_RISE", "Unused", "CONTACT_SUPPORT", XidAction::report},
    {53, "SILENT_RUNNING_TEMP_REDUCED_CLOCKING", "Unused", "CONTACT_SUPPORT", XidAction::report},
    {54, "SILENT_RUNNING_PWR_REDUCED_CLOCKING", "Auxiliary power is not connected to the GPU board",
     "CHECK_MECHANICALS", XidAction::report},
    {55, "SILENT_RUNNING_TEMPERATURE_READ_ERROR", "Unused", "CONTACT_SUPPORT", XidAction::report},
    {56, "DISPLAY_CHANNEL_EXCEPTION", "Unused", "CONTACT_SUPPORT", XidAction::report},
    {57, "FB_LINK_TRAINING_FAILURE_ERROR", "Unused", "CONTACT_SUPPORT", XidAction::report},
    {58, "FB_MEMORY_ERROR", "Unused", "CONTACT_SUPPORT", XidAction::report},
    {59, "PMU_ERROR", "Unused", "CONTACT_SUPPORT", XidAction::report},
    {60, "ROBUST_CHANNEL_SEC2_ERROR", "Video processor exception", "RESTART_APP", XidAction::restart_app},
    {61, "PMU_BREAKPOINT", "Unused", "CONTACT_SUPPORT", XidAction::report},
    {62, "PMU_HALT_ERROR", "Internal micro-controller halt (newer drivers)", "RESET_GPU", XidAction::reset_gpu},
    {63, "INFOROM_DRAM_RETIREMENT_EVENT", "GPU memory remapping event", "IGNORE", XidAction::none},
    {64, "INFOROM_DRAM_RETIREMENT_FAILURE", "GPU memory remapping failure", "RESET_GPU", XidAction::reset_gpu},
    {65, "ROBUST_CHANNEL_NVENC1_ERROR", "Unused", "CONTACT_SUPPORT", XidAction::report},
    {66, "ROBUST_CHANNEL_FECS_ERR_REG_ACCESS_VIOLATION", "Illegal access by driver", "IGNORE", XidAction::none},
    {67, "ROBUST_CHANNEL_FECS_ERR_VERIF_VIOLATION", "Illegal access by driver", "IGNORE", XidAction::none},
    {68, "ROBUST_CHANNEL_NVDEC0_ERROR", "NVDEC0 Exception", "RESTART_APP", XidAction::restart_app},
    {69, "ROBUST_CHANNEL_GR_CLASS_ERROR", "Graphics Engine class error", "RESTART_APP", XidAction::restart_app},
    {70, "ROBUST_CHANNEL_CE3_ERROR", "CE3: Unknown Error", "RESTART_APP", XidAction::restart_app},
    {71, "ROBUST_CHANNEL_CE4_ERROR", "CE4: Unknown Error", "RESTART_APP", XidAction::restart_app},
    {72, "ROBUST_CHANNEL_CE5_ERROR", "CE5: Unknown Error", "RESTART_APP", XidAction::restart_app},
    {73, "ROBUST_CHANNEL_NVENC2_ERROR", "Unused", "CONTACT_SUPPORT", XidAction::report},
    {74, "NVLINK_ERROR", "NVLINK Error", "WORKFLOW_NVLINK_ERR", XidAction::workflow},
    {75, "ROBUST_CHANNEL_CE6_ERROR", "CE6: Unknown Error", "RESTART_APP", XidAction::restart_app},
    {76, "ROBUST_CHANNEL_CE7_ERROR", "CE7: Unknown Error", "RESTART_APP", XidAction::restart_app},
    {77, "ROBUST_CHANNEL_CE8_ERROR", "CE8: Unknown Error", "RESTART_APP", XidAction::restart_app},
    {78, "VGPU_START_ERROR", "vGPU Start Error", "UPDATE_SWFW", XidAction::update_software},
    {79, "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS", "GPU has fallen off the bus", "RESTART_BM",
     XidAction::reboot_node},
    {80, "PBDMA_PUSHBUFFER_CRC_MISMATCH", "Corrupted data sent to GPU", "RESTART_APP", XidAction::restart_app},
    {81, "ROBUST_CHANNEL_VGA_SUBSYSTEM_ERROR", "Unused", "CONTACT_SUPPORT", XidAction::report},
    {82, "ROBUST_CHANNEL_NVJPG0_ERROR", "NVJPG0 Error", "RESTART_APP", XidAction::restart_app},
    {83, "ROBUST_CHANNEL_NVDEC1_ERROR", "NVDEC1 Error", "RESTART_APP", XidAction::restart_app},
    {84, "ROBUST_CHANNEL_NVDEC2_ERROR", "NVDEC2 Error", "RESTART_APP", XidAction::restart_app},
    {85, "ROBUST_CHANNEL_CE9_ERROR", "CE9: Unknown Error", "RESTART_APP", XidAction::restart_app},
    {86, "ROBUST_CHANNEL_OFA0_ERROR", "OFA Exception", "RESTART_APP", XidAction::restart_app},
    {87, "NVTELEMETRY_DRIVER_REPORT", "Unused", "CONTACT_SUPPORT", XidAction::report},
    {88, "ROBUST_CHANNEL_NVDEC3_ERROR", "NVDEC3 Error", "RESTART_APP", XidAction::restart_app},
    {89, "ROBUST_CHANNEL_NVDEC4_ERROR", "NVDEC4 Error", "RESTART_APP", XidAction::restart_app},
    {90, "LTC_ERROR", "Unused", "CONTACT_SUPPORT", XidAction::report},
    {91, "RESERVED_XID", "Unused", "CONTACT_SUPPORT", XidAction::report},
    {92, "EXCESSIVE_SBE_INTERRUPTS", "High single-bit ECC error rate", "IGNORE", XidAction::none},
    {93, "INFOROM_ERASE_LIMIT_EXCEEDED", "Non-fatal violation of provisioned InfoROM wear limit", "IGNORE",
     XidAction::none},
    {94, "ROBUST_CHANNEL_CONTAINED_ERROR", "Contained memory error", "RESTART_APP", XidAction::restart_app},
    {95, "ROBUST_CHANNEL_UNCONTAINED_ERROR", "Uncontained memory error", "RESET_GPU", XidAction::reset_gpu},
    {96, "ROBUST_CHANNEL_NVDEC5_ERROR", "NVDEC5 Error", "RESTART_APP", XidAction::restart_app},
    {97, "ROBUST_CHANNEL_NVDEC6_ERROR", "NVDEC6 Error", "RESTART_APP", XidAction::restart_app},
    {98, "ROBUST_CHANNEL_NVDEC7_ERROR", "NVDEC7 Error", "RESTART_APP", XidAction::restart_app},
    {99, "ROBUST_CHANNEL_NVJPG1_ERROR", "NVJPG1 Error", "RESTART_APP", XidAction::restart_app},
    {100, "ROBUST_CHANNEL_NVJPG2_ERROR", "NVJPG2 Error", "RESTART_APP", XidAction::restart_app},
    {101, "ROBUST_CHANNEL_NVJPG3_ERROR", "NVJPG3 Error", "RESTART_APP", XidAction::restart_app},
    {102, "ROBUST_CHANNEL_NVJPG4_ERROR", "NVJPG4 Error", "RESTART_APP", XidAction::restart_app},
    {103, "ROBUST_CHANNEL_NVJPG5_ERROR", "NVJPG5 Error", "RESTART_APP", XidAction::restart_app},
    {104, "ROBUST_CHANNEL_NVJPG6_ERROR", "NVJPG6 Error", "RESTART_APP", XidAction::restart_app},
    {105, "ROBUST_CHANNEL_NVJPG7_ERROR", "NVJPG7 Error", "RESTART_APP", XidAction::restart_app},
    {106, "SMBPBI_TEST_MESSAGE", "SMBPBI Test Message", "IGNORE", XidAction::none},
    {107, "SMBPBI_TEST_MESSAGE_SILENT", "SMBPBI Test Message Silent", "IGNORE", XidAction::none},
    {108, "NVLINK_REMOTE_TRANSLATION_ERROR", "Unused", "IGNORE", XidAction::none},
    {109, "ROBUST_CHANNEL_CTXSW_TIMEOUT_ERROR", "Context Switch Timeout Error", "RESET_GPU", XidAction::reset_gpu},
    {110, "SEC_FAULT_ERROR", "Security Fault Error", "RESET_GPU", XidAction::reset_gpu},
    {111, "BUNDLE_ERROR_EVENT", "Unused", "CONTACT_SUPPORT", XidAction::report},
    {112, "DISP_SUPERVISOR_ERROR", "Unused", "CONTACT_SUPPORT", XidAction::report},
    {113, "DP_LT_FAILURE", "Unused", "CONTACT_SUPPORT", XidAction::report},
    {114, "HEAD_RG_UNDERFLOW", "Unused", "CONTACT_SUPPORT", XidAction::report},
    {115, "CORE_CHANNEL_REGS", "Unused", "CONTACT_SUPPORT", XidAction::report},
    {116, "WINDOW_CHANNEL_REGS", "Unused", "CONTACT_SUPPORT", XidAction::report},
    {117, "CURSOR_CHANNEL_REGS", "Unused", "CONTACT_SUPPORT", XidAction::report},
    {118, "HEAD_REGS", "Unused", "CONTACT_SUPPORT", XidAction::report},
    {119, "GSP_RPC_TIMEOUT", "GSP RPC Timeout", "RESET_GPU", XidAction::reset_gpu},
    {120, "GSP_ERROR", "GSP Error", "RESET_GPU", XidAction::reset_gpu},
    {121, "C2C_ERROR", "C2C Error", "IGNORE", XidAction::none},
    {122, "SPI_PMU_RPC_READ_FAIL", "Unused", "CONTACT_SUPPORT", XidAction::report},
    {123, "SPI_PMU_RPC_WRITE_FAIL", "Unused", "CONTACT_SUPPORT", XidAction::report},
    {124, "SPI_PMU_RPC_ERASE_FAIL", "Unused", "CONTACT_SUPPORT", XidAction::report},
    {125, "INFOROM_FS_ERROR", "Unused", "CONTACT_SUPPORT", XidAction::report},
    {126, "ROBUST_CHANNEL_CE10_ERROR", "CE10: Unknown Error", "RESTART_APP", XidAction::restart_app},
    {127, "ROBUST_CHANNEL_CE11_ERROR", "CE11: Unknown Error", "RESTART_APP", XidAction::restart_app},
    {128, "ROBUST_CHANNEL_CE12_ERROR", "CE12: Unknown Error", "RESTART_APP", XidAction::restart_app},
    {129, "ROBUST_CHANNEL_CE13_ERROR", "CE13: Unknown Error", "RESTART_APP", XidAction::restart_app},
    {130, "ROBUST_CHANNEL_CE14_ERROR", "CE14: Unknown Error", "RESTART_APP", XidAction::restart_app},
    {131, "ROBUST_CHANNEL_CE15_ERROR", "CE15: Unknown Error", "RESTART_APP", XidAction::restart_app},
    {132, "ROBUST_CHANNEL_CE16_ERROR", "CE16: Unknown Error", "RESTART_APP", XidAction::restart_app},
    {133, "ROBUST_CHANNEL_CE17_ERROR", "CE17: Unknown Error", "RESTART_APP", XidAction::restart_app},
    {134, "ROBUST_CHANNEL_CE18_ERROR", "CE18: Unknown Error", "RESTART_APP", XidAction::restart_app},
    {135, "ROBUST_CHANNEL_CE19_ERROR", "CE19: Unknown Error", "RESTART_APP", XidAction::restart_app},
    {136, "ALI_TRAINING_FAIL", "Link Training Failed", "RESET_GPU", XidAction::reset_gpu},
    {137, "NVLINK_PRIV_ERR", "NVLink Privilege Error", "IGNORE", XidAction::none},
    {138, "ROBUST_CHANNEL_DLA_ERROR", "Unused", "CONTACT_SUPPORT", XidAction::report},
    {139, "ROBUST_CHANNEL_OFA1_ERROR", "OFA1 Error", "RESTART_APP", XidAction::restart_app},
    {140, "UNRECOVERABLE_ECC_ERROR_ESCAPE", "ECC Unrecovered Error", "RESET_GPU", XidAction::reset_gpu},
    {141, "ROBUST_CHANNEL_FAST_PATH_ERROR", "CUDA Fast Path Error", "IGNORE", XidAction::none},
    {142, "ROBUST_CHANNEL_NVENC3_ERROR", "NVENC3 Error", "CONTACT_SUPPORT", XidAction::report},
    {143, "GPU_INIT_ERROR", "GPU Initialization Error", "RESET_GPU", XidAction::reset_gpu},
    {144, "NVLINK_SAW_ERROR", "NVLINK: SAW Error", "WORKFLOW_NVLINK5_ERR", XidAction::workflow},
    {145, "NVLINK_RLW_ERROR", "NVLINK: RLW Error", "WORKFLOW_NVLINK5_ERR", XidAction::workflow},
    {146, "NVLINK_TLW_ERROR", "NVLINK: TLW Error", "WORKFLOW_NVLINK5_ERR", XidAction::workflow},
    {147, "NVLINK_TREX_ERROR", "NVLINK: TREX Error", "WORKFLOW_NVLINK5_ERR", XidAction::workflow},
    {148, "NVLINK_NVLPW_CTRL_ERROR", "NVLINK: NVLPW_CTRL Error", "WORKFLOW_NVLINK5_ERR", XidAction::workflow},
    {149, "NVLINK_NETIR_ERROR", "NVLINK: NETIR Error", "WORKFLOW_NVLINK5_ERR", XidAction::workflow},
    {150, "NVLINK_MSE_ERROR", "NVLINK: MSE Error", "WORKFLOW_NVLINK5_ERR", XidAction::workflow},
    {151, "ROBUST_CHANNEL_KEY_ROTATION_ERROR", "Key rotation Error", "RESTART_VM", XidAction::reboot_node},
    {152, "ROBUST_CHANNEL_DLA_SMMU_ERROR", "DLA SMMU Error", "IGNORE", XidAction::none},
    {153, "ROBUST_CHANNEL_DLA_TIMEOUT", "DLA timeout Error", "IGNORE", XidAction::none},
    {154, "GPU_RECOVERY_ACTION_CHANGED", "GPU Recovery Action Changed", "XID_154", XidAction::workflow},
    {155, "NVLINK_SW_DEFINED_ERROR", "NVLINK: SW Defined Error", "RESET_GPU", XidAction::reset_gpu},
    {156, "RESOURCE_RETIREMENT_EVENT", "Resource Retirement Event", "RESET_GPU", XidAction::reset_gpu},
    {157, "RESOURCE_RETIREMENT_FAILURE", "Resource Retirement Failure", "IGNORE", XidAction::none},
    {158, "GPU_FATAL_TIMEOUT", "GPU Fatal Timeout", "RESET_GPU", XidAction::reset_gpu},
    {159, "ROBUST_CHANNEL_CHI_NON_DATA_ERROR", "CHI Non-Data Error", "CHECK_UVM", XidAction::workflow},
    {160, "CHANNEL_RETIREMENT_EVENT", "Channel Retirement Event", "IGNORE", XidAction::none},
    {161, "CHANNEL_RETIREMENT_FAILURE", "Channel Retirement Failure", "IGNORE", XidAction::none},
    {162, "PSHC_REENGAGED", "Power Smoothing HW Circuitry capability reengaged", "", XidAction::unstated},
    {163, "PSHC_DISENGAGED", "Power Smoothing HW Circuitry capability disengaged", "", XidAction::unstated},
    {164, "PSHC_LOW_LIFETIME", "Power Smoothing HW Circuitry low lifetime reached", "", XidAction::unstated},
    {165, "PSHC_ZERO_LIFETIME", "Power Smoothing HW Circuitry lifetime exhausted", "", XidAction::unstated},
    {166, "NVLINK_SECURE_CRYPTO_ERR", "CC traffic seen prior to link properly being configured for encrypted traffic",
     "", XidAction::unstated},
    {167, "PCIE_FATAL_TIMEOUT", "PCIE_FATAL_TIMEOUT", "", XidAction::unstated},
    {168, "REDUCED_GPU_MEMORY_CAPACITY", "Errors found in WPR (write protected region)", "", XidAction::unstated},
    {169, "SEC2_HALT_ERROR", "Internal micro-controller halt", "", XidAction::unstated},
    {170, "NVLINK_SECURE_OTHER", "Interrupt seen in CC mode", "", XidAction::unstated},
    {171, "UNCORRECTABLE_DRAM_ERROR",
     "Additional to Xid 48 providing more details on particulars of fault to differentiate DRAM/SRAM", "",
     XidAction::unstated},
    {172, "UNCORRECTABLE_SRAM_ERROR",
     "Additional to Xid 48 providing more details on particulars of fault to differentiate DRAM/SRAM", "",
     XidAction::unstated},
};

// Azure/azurehpc-health-checks@0e0a1ac26a64b32ac4dd7632a529638505d3314a customTests/azure_gpu_xid.nhc:
// XID_EC="48 56 57 58 62 63 64 65 68 69 73 74 79 80 81 92 119 120".
constexpr std::array<int, 18> kAzureFailing = {48, 56, 57, 58, 62, 63, 64, 65,  68,
                                               69, 73, 74, 79, 80, 81, 92, 119, 120};

bool hex(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

// "DDDD:BB:DD" or "DDDD:BB:DD.F": the driver's bus id.
bool bus_id(std::string_view s) {
  if (s.size() != 10 && s.size() != 12) return false;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const bool sep = i == 4 || i == 7;
    if (i == 10 ? s[i] != '.' : sep ? s[i] != ':' : !hex(s[i])) return false;
  }
  return true;
}

} // namespace

const char* to_string(XidAction action) {
  switch (action) {
  case XidAction::none:
    return "no action";
  case XidAction::restart_app:
    return "restart the application";
  case XidAction::reset_gpu:
    return "reset the GPU";
  case XidAction::reboot_node:
    return "reboot the node";
  case XidAction::report:
    return "report it (support ticket)";
  case XidAction::update_software:
    return "update driver and firmware";
  case XidAction::workflow:
    return "follow NVIDIA's workflow for it";
  case XidAction::unstated:
    return "no action stated";
  }
  return "unknown";
}

bool takes_node_out(XidAction action) {
  return action == XidAction::reset_gpu || action == XidAction::reboot_node || action == XidAction::report;
}

std::span<const XidEntry> xid_catalogue() {
  return kCatalogue;
}

const XidEntry* find_xid(int code) {
  const auto* it =
      std::find_if(std::begin(kCatalogue), std::end(kCatalogue), [code](const XidEntry& e) { return e.code == code; });
  return it == std::end(kCatalogue) ? nullptr : it;
}

std::span<const int> azure_failing_xids() {
  return kAzureFailing;
}

bool azure_fails_node(int code) {
  return std::find(kAzureFailing.begin(), kAzureFailing.end(), code) != kAzureFailing.end();
}

std::optional<XidLine> parse_xid_line(std::string_view message) {
  constexpr std::string_view kMark = "NVRM: Xid (";
  const auto at = message.find(kMark);
  if (at == std::string_view::npos) return std::nullopt;
  std::string_view rest = message.substr(at + kMark.size());
  if (rest.starts_with("PCI:")) rest.remove_prefix(4);
  const auto close = rest.find("): ");
  if (close == std::string_view::npos || !bus_id(rest.substr(0, close))) return std::nullopt;
  XidLine line;
  line.bus = std::string(rest.substr(0, close));
  rest.remove_prefix(close + 3);
  const auto [end, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), line.code);
  if (ec != std::errc{} || end == rest.data() || line.code <= 0) return std::nullopt;
  rest.remove_prefix(static_cast<std::size_t>(end - rest.data()));
  if (!rest.empty() && rest.front() != ',') return std::nullopt;
  if (!rest.empty()) rest.remove_prefix(1);
  while (!rest.empty() && rest.front() == ' ')
    rest.remove_prefix(1);
  line.detail = std::string(rest);
  return line;
}

} // namespace hpcbake::verify
