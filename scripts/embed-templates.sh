#!/usr/bin/env bash
# scripts/embed-templates.sh OUT.S FILE... — writes an assembler file that
# embeds the kernel templates into yolocc as one NUL-terminated blob, each
# file introduced by a line "@@@ PATH" (compiler/templates.c reads it).
set -euo pipefail
out=$1
shift
{
  echo '    .section .rodata'
  echo '    .global yk_templates'
  echo 'yk_templates:'
  for f in "$@"; do
    printf '    .ascii "\\n@@@ %s\\n"\n' "${f#templates/}"
    printf '    .incbin "%s"\n' "$f"
  done
  echo '    .ascii "\n@@@ \n"'
  echo '    .byte 0'
  echo '    .section .note.GNU-stack,"",@progbits'
} >"$out"
