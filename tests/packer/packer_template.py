"""packer/hpcbake.pkr.hcl as the tests run it with Debian 12's Packer 1.6.6.

The template is written for Packer 1.7.0 or later with the Azure plugin (packer init). Debian's
packer 1.6.6 bundles an older azure-arm builder and the null and qemu builders, and is what the
tests have (there is no Azure here, and no network to install a plugin from). Exactly these
adaptations are made, and each is checked to have found what it removes:

  for_packer_1_6  removes the `packer { required_version, required_plugins }` block: 1.6.6
                  refuses required_plugins ("Blocks of type "required_plugins" are not expected
                  here"; it came with 1.7.0).
  azure_for_packer_1_6
                  on top of that, in the azure-arm source only: removes security_type,
                  secure_boot_enabled and vtpm_enabled (the built-in builder predates them: the
                  plugin added the last two in 1.4.1, security_type in 2.0.5) and adds
                  managed_image_name and managed_image_resource_group_name (the built-in builder
                  cannot publish to a gallery without an intermediate managed image; the plugin
                  can since 1.4.0, and must not have one with Secure Boot or a vTPM).
                  It also removes the source's `dynamic "spot"` block (the built-in builder
                  predates `spot`: "Blocks of type "spot" are not expected here"), which the
                  spot variable feeds; the variable and its validation stay.
  with_sizes      adds the tests' own fixture sizes (Standard_Test*_v1, ...) to the list the
                  `size` variable's validation accepts, for the builds against fixture manifests.
  with_source     swaps the azure-arm source for another (null, qemu) and names it in the build
                  block; the variables, locals and the build block with every provisioner stay as
                  they are.
"""
import os
import re

SRC = os.environ.get("HPCBAKE_SOURCE_DIR") or os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PACKER_DIR = os.path.join(SRC, "packer")
TEMPLATE = os.path.join(PACKER_DIR, "hpcbake.pkr.hcl")
EXAMPLE = os.path.join(PACKER_DIR, "example.pkrvars.hcl")
STEP_SCRIPT = os.path.join(PACKER_DIR, "scripts", "hpcbake-step.sh")
AZURE_SOURCE = 'source "azure-arm" "hpcbake" {'
AZURE_REF = '"source.azure-arm.hpcbake"'
# The Trusted Launch arguments of the azure-arm source (the plugin's names: docs/builders/arm.mdx).
TRUSTED_LAUNCH_ARGS = ("security_type", "secure_boot_enabled", "vtpm_enabled")


def read():
    with open(TEMPLATE) as f:
        return f.read()


def block(text, header):
    """(start, end) of the top-level block that opens with the line `header` (ends at "\\n}\\n")."""
    start = text.index("\n" + header + "\n") + 1
    end = text.index("\n}\n", start) + 3
    return start, end


def for_packer_1_6(text):
    start, end = block(text, "packer {")
    removed = text[start:end]
    if 'source = "github.com/hashicorp/azure"' not in removed or "required_plugins {" not in removed:
        raise AssertionError(f"{TEMPLATE}: the packer block does not require the Azure plugin:\n{removed}")
    return text[:start] + text[end:]


def source_block(text):
    start, end = block(text, AZURE_SOURCE)
    return text[start:end]


def azure_for_packer_1_6(text):
    text = for_packer_1_6(text)
    start, end = block(text, AZURE_SOURCE)
    src = text[start:end]
    for arg in TRUSTED_LAUNCH_ARGS:
        src, n = re.subn(rf"\n  {arg} +=[^\n]*", "", src)
        if n != 1:
            raise AssertionError(f"{TEMPLATE}: the azure-arm source sets {arg} {n} times, expected once")
    src, n = re.subn(r'\n  dynamic "spot" \{\n.*?\n  \}\n', "\n", src, flags=re.S)
    if n != 1:
        raise AssertionError(f"{TEMPLATE}: the azure-arm source has {n} dynamic spot blocks, expected one")
    src = src.replace(
        "\n  shared_image_gallery_destination {",
        '\n  managed_image_name                = "${var.gallery_image_name}-${var.gallery_image_version}"'
        '\n  managed_image_resource_group_name = var.gallery_resource_group'
        "\n  shared_image_gallery_destination {", 1)
    return text[:start] + src + text[end:]


def with_sizes(text, sizes):
    """The template with SIZES (the tests' fixture sizes) added to the sizes the size variable's
    validation accepts."""
    start, end = block(text, 'variable "size" {')
    var = text[start:end]
    marker = "    ] : lower(s)], lower(var.size))"
    if var.count(marker) != 1:
        raise AssertionError(f"{TEMPLATE}: the size variable's validation has no list of sizes")
    extra = "".join(f'      "{s}",\n' for s in sizes)
    return text[:start] + var.replace(marker, extra + marker) + text[end:]


def with_source(text, source, ref):
    """The template (already for_packer_1_6) with the azure-arm source replaced by `source` (HCL),
    built as `ref` ("source.null.hpcbake")."""
    start, end = block(text, AZURE_SOURCE)
    text = text[:start] + source + text[end:]
    if text.count(AZURE_REF) != 1:
        raise AssertionError(f"{TEMPLATE}: expected one build of {AZURE_REF}")
    return text.replace(AZURE_REF, f'"{ref}"')


def build_provisioners(text):
    """The build block's provisioners in order: (kind, body) with body the text between braces."""
    start, end = block(text, "build {")
    build = text[start:end]
    out = []
    for m in re.finditer(r'^  provisioner "(\w+)" \{\n(.*?)\n  \}$', build, re.S | re.M):
        out.append((m.group(1), m.group(2)))
    return out


def variables(text):
    """{name: body} of every variable block."""
    return {m.group(1): m.group(2) for m in re.finditer(r'^variable "(\w+)" \{\n(.*?)\n\}$', text, re.S | re.M)}


def required_variables(text):
    return sorted(n for n, body in variables(text).items() if not re.search(r"^  default\s*=", body, re.M))


def assigned(path):
    """The variable names a .pkrvars.hcl file assigns."""
    with open(path) as f:
        return sorted(re.findall(r"^(\w+)\s*=", f.read(), re.M))


def hcl_string(s):
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'  # no "${" or "%{" in what the tests pass
