#!/bin/sh
# Proves an image version baked on another size (packer/hpcbake.pkr.hcl with build_vm_size other
# than size): one VM of the target size boots from exactly that version, the hpcbake boot unit
# runs the hardware checks the bake deferred, and only a healthy first-boot verdict marks the
# version for use (publishingProfile.excludeFromLatest = false; the template published it with
# true). The VM, its NIC and its disk are deleted in every case. packer/README.md, "Bake on any
# size, prove on the target", is the guide.
#
# Usage: sh prove-image.sh --image-version-id ID --resource-group RG [options]
#   --image-version-id ID  /subscriptions/S/resourceGroups/G/providers/Microsoft.Compute/galleries/
#                          GALLERY/images/DEFINITION/versions/M.m.p: the version Packer published
#   --resource-group RG    where the VM is created (it must exist; it may be another subscription's
#                          than the gallery's: the az CLI's current one)
#   --size SIZE            the target size (default: the version's "size" tag, which the template
#                          writes)
#   --location LOCATION    where the VM runs (default: the resource group's); the version must be
#                          replicated there
#   --subnet SUBNET_ID     an existing subnet for the VM's NIC (default: az vm create picks or makes
#                          one in the resource group). Run Command needs outbound access from the VM
#   --security-type TYPE   Standard or TrustedLaunch (default: from the image definition's
#                          SecurityType feature: TrustedLaunch and TrustedLaunchSupported give
#                          TrustedLaunch, none gives Standard)
#   --secure-boot BOOL     with TrustedLaunch: Secure Boot on the VM (default true)
#   --wait SECONDS         how long the VM waits for its first-boot verdict (default 900, the boot
#                          unit's TimeoutStartSec; at most 5000: Run Command ends a script after 90
#                          minutes)
#   --name NAME            the VM's name (default hpcbake-prove-YYYYmmddHHMMSS)
#   --hpcbake PATH         hpcbake on the VM (default /opt/hpcbake/bin/hpcbake, the template's
#                          hpcbake_dir)
#   --ssh-key-values KEYS  passed to az vm create (default --generate-ssh-keys: nobody logs in)
#   --public-ip            give the VM a public IP address (default none)
#   --no-mark              report the verdict, change nothing in the gallery
#
# What it runs, each command and flag as Azure CLI's reference has it
# (MicrosoftDocs/azure-docs-cli@e97b361d00a5deca1759cc063e05ae2d53ea95e0
# docs-ref-autogen/Latest-version/latest/{vm,vm/run-command,sig/image-version,sig/image-definition,
# resource,disk}.yml):
#   az sig image-version show --ids ID --query tags.size -o tsv          (without --size)
#   az sig image-definition show -g -r -i --subscription
#     --query "features[?name=='SecurityType'].value | [0]" -o tsv       (without --security-type)
#   az vm create -g RG -n NAME --image ID --size SIZE --security-type ... [--enable-secure-boot
#     --enable-vtpm] --public-ip-address "" --nsg "" --os-disk-name NAME-osdisk
#     --os-disk-delete-option Delete --nic-delete-option Delete --tags hpcbake-prove=NAME
#   az vm run-command invoke -g RG -n NAME --command-id RunShellScript --scripts '...'
#     --query "value[0].message" -o tsv
#     The script runs `hpcbake verify --node-state --wait SECONDS` and prints its exit status last,
#     as "hpcbake-prove: exit N": Run Command's JSON reports a Linux script's stdout and stderr
#     in one message ({"value":[{"code":"ProvisioningState/succeeded","message":"Enable succeeded:
#     \n[stdout]\n...\n[stderr]\n..."}]}, MicrosoftDocs/azure-dev-docs@0783e83576bb0c5a0e79aa0b6599e3920b93fb15
#     articles/java/migration/migrate-websphere-to-azure-vm-manually.md) and no exit code, and keeps
#     only the output's last 4,096 bytes (MicrosoftDocs/azure-compute-docs@1a043fb3a20b0f90dff80bad2dd8cbdff8984386
#     articles/virtual-machines/linux/run-command.md, "Restrictions"), so the status comes last.
#   az sig image-version update -g -r -i -e --subscription
#     --set publishingProfile.excludeFromLatest=false                    (healthy only)
#   clean-up: az vm show / az vm delete --yes; az resource list -g RG --tag hpcbake-prove=NAME
#     --query "[].id" -o tsv and az resource delete --ids (what az vm create made that the VM did
#     not take with it); az disk show / az disk delete --yes (NAME-osdisk). A show command exits 3
#     for a resource that does not exist (Azure CLI 2.0.67 release notes: "Changed 'show' commands
#     to ... fail with exit code of 3 upon a missing resource", docs-ref-conceptual/Latest-version/
#     release-notes-azure-cli.md).
#
# Exit status:
#   0  proven: the first-boot verdict is healthy, the version is marked for use, the VM is deleted
#   6  unhealthy, or no verdict of this boot within --wait: the version is not marked (the failed
#      checks are printed), the VM is deleted
#   2  usage: a missing or malformed option
#   3  an az command failed (the VM could not be created, Run Command failed, the version could
#      not be marked), or no verdict came back: nothing is marked, the VM is deleted
#   4  the clean-up failed: what is left is named (delete it yourself); the verdict was printed
#  130 interrupted (the VM is deleted first)
# Nothing here can be tested against Azure: tests/packer/test_prove_image.py runs it against a fake
# `az` (tests/packer/fake-az) that answers in the CLI's shapes.
set -eu

usage() {
  echo "prove-image: $*" >&2
  echo "usage: sh prove-image.sh --image-version-id ID --resource-group RG [--size SIZE] [--location LOCATION]" \
    "[--subnet SUBNET_ID] [--security-type Standard|TrustedLaunch] [--secure-boot true|false] [--wait SECONDS]" \
    "[--name NAME] [--hpcbake PATH] [--ssh-key-values KEYS] [--public-ip] [--no-mark]" >&2
  exit 2
}

version_id='' rg='' size='' location='' subnet='' security='' secure_boot=true wait=900 name=''
hpcbake=/opt/hpcbake/bin/hpcbake keys='' public_ip=no mark=yes
while [ $# -gt 0 ]; do
  case $1 in
  --public-ip)
    public_ip=yes
    shift
    continue
    ;;
  --no-mark)
    mark=no
    shift
    continue
    ;;
  --image-version-id | --resource-group | -g | --size | --location | --subnet | --security-type | --secure-boot | \
    --wait | --name | --hpcbake | --ssh-key-values)
    [ $# -ge 2 ] || usage "$1 needs a value"
    ;;
  *) usage "unknown option '$1'" ;;
  esac
  case $1 in
  --image-version-id) version_id=$2 ;;
  --resource-group | -g) rg=$2 ;;
  --size) size=$2 ;;
  --location) location=$2 ;;
  --subnet) subnet=$2 ;;
  --security-type) security=$2 ;;
  --secure-boot) secure_boot=$2 ;;
  --wait) wait=$2 ;;
  --name) name=$2 ;;
  --hpcbake) hpcbake=$2 ;;
  --ssh-key-values) keys=$2 ;;
  esac
  shift 2
done

[ -n "$version_id" ] || usage "--image-version-id is required (the image version Packer published)"
[ -n "$rg" ] || usage "--resource-group is required (where the VM is created)"
# /subscriptions/S/resourceGroups/G/providers/Microsoft.Compute/galleries/R/images/I/versions/V
case $version_id in
/subscriptions/*/resourceGroups/*/providers/Microsoft.Compute/galleries/*/images/*/versions/*) ;;
*) usage "--image-version-id must be /subscriptions/S/resourceGroups/G/providers/Microsoft.Compute/galleries/GALLERY/images/DEFINITION/versions/M.m.p (it is '$version_id')" ;;
esac
old_ifs=$IFS
IFS=/
set -f
# shellcheck disable=SC2086 # split on '/'
set -- $version_id
set +f
IFS=$old_ifs
[ $# -eq 13 ] || usage "--image-version-id has $(($# - 1)) path segments, not 12 (it is '$version_id')"
g_sub=$3 g_rg=$5 g_name=$9 g_image=${11} g_version=${13}
case $g_version in
*[!0-9.]* | .* | *. | *..*) usage "the image version '$g_version' is not Major.Minor.Patch" ;;
esac
case $wait in
'' | *[!0-9]*) usage "--wait must be a number of seconds (it is '$wait')" ;;
esac
[ "$wait" -le 5000 ] || usage "--wait $wait is over 5000 s: Run Command ends a script after 90 minutes"
case $secure_boot in
true | false) ;;
*) usage "--secure-boot must be true or false (it is '$secure_boot')" ;;
esac
case $security in
'' | Standard | TrustedLaunch) ;;
*) usage "--security-type must be Standard or TrustedLaunch (it is '$security')" ;;
esac
case $size in
'' | Standard_*) ;;
*) usage "--size must be an Azure size name such as Standard_ND96isr_H100_v5 (it is '$size')" ;;
esac
[ -n "$name" ] || name=hpcbake-prove-$(date -u +%Y%m%d%H%M%S)
case $name in
*[!A-Za-z0-9-]* | -*) usage "--name must be letters, digits and '-' (it is '$name')" ;;
esac
case $hpcbake in
/*[!A-Za-z0-9/._-]*) usage "--hpcbake must be an absolute path of letters, digits, '/', '.', '_' and '-' (it is '$hpcbake')" ;;
/?*) ;;
*) usage "--hpcbake must be an absolute path (it is '$hpcbake')" ;;
esac

say() { echo "prove-image: $*"; }
fail() {
  echo "prove-image: $*" >&2
  exit 3
}

# The verdict's own exit status; the clean-up may still turn it into 4.
created=no
# shellcheck disable=SC2317 # run by the EXIT trap
cleanup() {
  rc=$?
  trap - EXIT INT TERM HUP
  set +e -f
  [ "$created" = yes ] || exit "$rc"
  left=
  say "deleting VM $name (its NIC and OS disk go with it: --nic-delete-option and --os-disk-delete-option Delete)"
  az vm show -g "$rg" -n "$name" --query id -o tsv >/dev/null 2>&1
  case $? in
  3) ;; # no such VM: creation failed before it existed
  *) az vm delete -g "$rg" -n "$name" --yes -o none || left="$left VM:$name" ;;
  esac
  # What az vm create made and the VM did not take with it (a creation that failed half-way):
  # NICs first, virtual networks last, each tagged hpcbake-prove=NAME by az vm create.
  if ids=$(az resource list -g "$rg" --tag "hpcbake-prove=$name" --query "[].id" -o tsv); then
    for pass in nic other vnet; do
      for id in $ids; do
        case $pass:$id in
        nic:*/networkInterfaces/* | vnet:*/virtualNetworks/*) ;;
        other:*/networkInterfaces/* | other:*/virtualNetworks/* | nic:* | vnet:*) continue ;;
        esac
        say "deleting $id"
        az resource delete --ids "$id" -o none || left="$left $id"
      done
    done
  else
    left="$left (resources tagged hpcbake-prove=$name: listing them failed)"
  fi
  az disk show -g "$rg" -n "$name-osdisk" --query id -o tsv >/dev/null 2>&1
  case $? in
  3) ;;
  *) az disk delete -g "$rg" -n "$name-osdisk" --yes -o none || left="$left disk:$name-osdisk" ;;
  esac
  if [ -n "$left" ]; then
    echo "prove-image: the clean-up failed; still in resource group $rg:$left. Delete them yourself" \
      "(az vm delete, az resource delete --ids, az disk delete): a VM of size $size bills until then" >&2
    exit 4
  fi
  say "deleted VM $name"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

if [ -z "$size" ]; then
  size=$(az sig image-version show --ids "$version_id" --query tags.size -o tsv) ||
    fail "az sig image-version show --ids $version_id failed: check the ID and your az login"
  case $size in
  Standard_*) ;;
  *) usage "the image version has no 'size' tag (the template writes one): give --size" ;;
  esac
fi
if [ -z "$security" ]; then
  feature=$(az sig image-definition show -g "$g_rg" -r "$g_name" -i "$g_image" --subscription "$g_sub" \
    --query "features[?name=='SecurityType'].value | [0]" -o tsv) ||
    fail "az sig image-definition show -g $g_rg -r $g_name -i $g_image failed"
  case $feature in
  '' | None | Standard) security=Standard ;;
  TrustedLaunch | TrustedLaunchSupported) security=TrustedLaunch ;;
  *) usage "the image definition's security type is $feature: give --security-type" ;;
  esac
fi

say "image version $g_image $g_version (gallery $g_name), target size $size, security type $security"
set -f
set -- --image "$version_id" --size "$size" --security-type "$security"
if [ "$security" = TrustedLaunch ]; then set -- "$@" --enable-secure-boot "$secure_boot" --enable-vtpm true; fi
if [ -n "$location" ]; then set -- "$@" --location "$location"; fi
if [ -n "$subnet" ]; then set -- "$@" --subnet "$subnet"; fi
if [ "$public_ip" = no ]; then set -- "$@" --public-ip-address "" --nsg ""; fi
if [ -n "$keys" ]; then set -- "$@" --ssh-key-values "$keys"; else set -- "$@" --generate-ssh-keys; fi
set +f
say "creating VM $name in $rg"
created=yes
az vm create -g "$rg" -n "$name" "$@" --os-disk-name "$name-osdisk" --os-disk-delete-option Delete \
  --nic-delete-option Delete --tags "hpcbake-prove=$name" -o none ||
  fail "az vm create failed: no capacity or quota for $size in this region is the usual cause"

# The first boot's verdict: the boot unit's node state, waited for on the VM.
script="hb='$hpcbake'; out=\$(mktemp); if [ -x \"\$hb\" ]; then \"\$hb\" verify --node-state --wait $wait >\"\$out\" 2>&1; rc=\$?;"
script="$script else echo \"\$hb is missing: not an image hpcbake baked\" >\"\$out\"; rc=127; fi;"
script="$script tail -c 3500 \"\$out\"; rm -f \"\$out\"; echo; echo \"hpcbake-prove: exit \$rc\""
say "waiting up to ${wait}s for the first-boot verdict (hpcbake verify --node-state --wait $wait, by Run Command)"
message=$(az vm run-command invoke -g "$rg" -n "$name" --command-id RunShellScript --scripts "$script" \
  --query "value[0].message" -o tsv) || fail "az vm run-command invoke on $name failed"

# "Enable succeeded: \n[stdout]\n...\n[stderr]\n...": the stdout part, its last status line.
stdout=$(printf '%s\n' "$message" | sed -n '/^\[stdout\]$/,/^\[stderr\]$/p' | sed -e '1d' -e '/^\[stderr\]$/d')
status=$(printf '%s\n' "$stdout" | sed -n 's/^hpcbake-prove: exit \([0-9][0-9]*\)$/\1/p' | tail -n 1)
printf '%s\n' "$stdout" | grep -v '^hpcbake-prove: exit [0-9]*$' | sed 's/^/  | /'
case $status in
'')
  printf '%s\n' "$message" | sed 's/^/  : /' >&2
  fail "no verdict came back from $name (Run Command's message above has no 'hpcbake-prove: exit N')"
  ;;
0) say "first-boot verdict on $size: HEALTHY" ;;
6)
  say "first-boot verdict on $size: UNHEALTHY (or none within ${wait}s); $g_image $g_version is not marked for use"
  exit 6
  ;;
*) fail "hpcbake verify --node-state on $name exited $status (see its output above)" ;;
esac

if [ "$mark" = yes ]; then
  az sig image-version update -g "$g_rg" -r "$g_name" -i "$g_image" -e "$g_version" --subscription "$g_sub" \
    --set publishingProfile.excludeFromLatest=false -o none ||
    fail "az sig image-version update of $g_image $g_version failed: it is proven but not marked for use"
  say "$g_image $g_version is proven on $size and marked for use (excludeFromLatest false)"
else
  say "$g_image $g_version is proven on $size (--no-mark: not marked)"
fi
exit 0
