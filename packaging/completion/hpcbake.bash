# bash completion for hpcbake (installed to /usr/share/bash-completion/completions/hpcbake).
# The binary answers from its own definitions (hpcbake __complete WORD...): commands, options,
# option values, sizes, distros and profiles. Nothing answered: file names.
_hpcbake() {
  local cur="${COMP_WORDS[COMP_CWORD]}"
  local IFS=$'\n'
  local candidates
  candidates=$("${COMP_WORDS[0]}" __complete "${COMP_WORDS[@]:1:COMP_CWORD}" 2>/dev/null)
  if [[ -z "$candidates" ]]; then
    compopt -o default 2>/dev/null
    COMPREPLY=()
    return 0
  fi
  [[ "$cur" == "=" ]] && cur=""
  COMPREPLY=($(compgen -W "$candidates" -- "$cur"))
}
complete -F _hpcbake hpcbake
