# bash completion for hpcbake (installed to /usr/share/bash-completion/completions/hpcbake).
_hpcbake() {
  local cur prev words cword
  if declare -F _init_completion >/dev/null 2>&1; then
    _init_completion || return
  else
    cur="${COMP_WORDS[COMP_CWORD]}"
    prev="${COMP_WORDS[COMP_CWORD-1]}"
    words=("${COMP_WORDS[@]}")
    cword=$COMP_CWORD
  fi

  local verbs="detect plan sizes fetch bundle cache manifest extract module nouveau rdma container verify install seal"
  local global="--root --manifests --imds-url --no-imds --help --version"

  # Options that take a value: complete files, directories or fixed words.
  case "$prev" in
    --root | --manifests | --cache | --dkmstree | --sourcetree | --installtree | --key-dir)
      COMPREPLY=($(compgen -d -- "$cur")); return ;;
    --bundle | --junit | --ca-file | --sign-key | --sign-cert)
      COMPREPLY=($(compgen -f -- "$cur")); return ;;
    --driver) COMPREPLY=($(compgen -W "cuda grid" -- "$cur")); return ;;
    --profile) COMPREPLY=($(compgen -W "default minimal containers ai" -- "$cur")); return ;;
    --engine) COMPREPLY=($(compgen -W "docker containerd" -- "$cur")); return ;;
    --docker-config | --containerd-config | --runtime-binary) COMPREPLY=($(compgen -f -- "$cur")); return ;;
    --sign) COMPREPLY=($(compgen -W "auto on off" -- "$cur")); return ;;
    --level) COMPREPLY=($(compgen -W "0 1 2" -- "$cur")); return ;;
    --reboot) COMPREPLY=($(compgen -W "exit auto never" -- "$cur")); return ;;
    --size | --distro | --imds-url | --mirror | --sha256 | --kernel | --name | --version | --module | --lock-timeout)
      return ;;
  esac

  # The verb (and sub-verb) typed so far, skipping global options and their values.
  local verb="" sub="" i w
  for ((i = 1; i < cword; i++)); do
    w="${words[i]}"
    case "$w" in
      --root | --manifests | --imds-url) ((i++)); continue ;;
      -*) continue ;;
    esac
    if [ -z "$verb" ]; then verb="$w"; elif [ -z "$sub" ]; then sub="$w"; fi
  done

  local opts=""
  case "$verb" in
    "") if [[ "$cur" == -* ]]; then opts="$global"; else opts="$verbs"; fi ;;
    detect) opts="--json" ;;
    plan) opts="--size --distro --profile --driver --sign --json" ;;
    fetch) opts="--size --distro --profile --all --cache --parallel --mirror --ca-file --sha256 --stall-timeout --retry-backoff --attempts --json --bundle" ;;
    bundle) [ -z "$sub" ] && opts="create" || opts="--size --distro --profile --all --cache --mirror --ca-file --sha256" ;;
    cache) [ -z "$sub" ] && opts="list verify gc --cache" ;;
    manifest) [ -z "$sub" ] && opts="lint" ;;
    extract) COMPREPLY=($(compgen -f -- "$cur")); return ;;
    module) [ -z "$sub" ] && opts="install" || opts="--name --version --module --kernel --all-kernels --subdir --install-headers --sign --sign-key --sign-cert --key-dir --dkmstree --sourcetree --installtree --no-depmod" ;;
    nouveau) [ -z "$sub" ] && opts="disable" || opts="--distro --kernel" ;;
    rdma) [ -z "$sub" ] && opts="enable disable status" || opts="--size --distro --json --create --no-restart" ;;
    container) [ -z "$sub" ] && opts="configure status" || opts="--engine --docker-config --containerd-config --runtime-binary --no-restart --json" ;;
    verify) opts="--size --distro --level --json --junit --fabric-wait --ib-device --gid-index --gpu-bw-mib --ib-iterations --ib-bw-fraction" ;;
    install) opts="--size --distro --profile --yes --dry-run --bundle --reboot --lock-timeout --resume-unit" ;;
    seal) opts="--deprovision --remove-signing-key --check --json" ;;
    sizes) opts="--gpu --ib --json" ;;
  esac
  COMPREPLY=($(compgen -W "$opts --help" -- "$cur"))
}
complete -F _hpcbake hpcbake
