#!/usr/bin/env bash
# Hostile inputs to the `cuactor` CLI (issue 16): each case must end with a typed message and the
# right exit status, never an abort (134), a lie or a deleted user file.
# Usage: cli_hardening.sh CUACTOR_BINARY WORK_DIR CASE
set -uo pipefail
cli=$1 work=$2 case=$3
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 2
export CUACTOR_CACHE_DIR=$work/cache
fail() { echo "FAIL [$case]: $*"; echo "--- stdout:"; cat out 2>/dev/null; echo "--- stderr:"; cat err 2>/dev/null; exit 1; }
run() { "$@" >out 2>err; rc=$?; }
expect_rc() { [[ $rc -eq $1 ]] || fail "exit status $rc, expected $1"; }
expect_failure() { [[ $rc -ne 0 && $rc -lt 128 ]] || fail "exit status $rc, expected a non-zero status without a signal"; }
expect_in() { grep -q -- "$2" "$1" || fail "'$2' not in $1"; }
expect_not_in() { ! grep -q -- "$2" "$1" || fail "'$2' in $1"; }

case $case in
  warm_directory)  # row 1: was an uncaught std::ios_failure (exit 134)
    mkdir srcdir
    run "$cli" jit warm --nvrtc srcdir
    expect_failure; expect_in err "is a directory"; expect_in err "srcdir" ;;
  warm_nul_byte)  # row 2: was silently truncated and reported "warmed"
    printf 'extern "C" __global__ void k() {}\n\0 syntax error here' > nul.cu
    run "$cli" jit warm --nvrtc nul.cu --arch sm_80
    expect_failure; expect_in err "NUL byte at offset 34" ;;
  clear_unwritable)  # row 3: said "cleared" and exit 0 with nothing removed
    [[ $(id -u) -eq 0 ]] && { echo "skipped: root ignores permissions"; exit 0; }
    mkdir -p cache/jit && touch cache/jit/0123456789abcdef0123456789abcdef.cjit && chmod 0500 cache/jit
    run "$cli" jit clear
    chmod 0700 cache/jit
    expect_failure; expect_in err "could not remove 1"; [[ -e cache/jit/0123456789abcdef0123456789abcdef.cjit ]] ||
      fail "entry vanished" ;;
  clear_own_files_only)  # rows 3 and 7: clear removed any name containing ".cjit", left locks
    mkdir -p cache/jit
    touch cache/jit/{notes.cjit.txt,report.tmp.txt,0123456789abcdef0123456789abcdef.cjit,0123456789abcdef0123456789abcdef.lock}
    run "$cli" jit clear
    expect_rc 0
    [[ -e cache/jit/notes.cjit.txt && -e cache/jit/report.tmp.txt ]] || fail "a user file was deleted"
    [[ ! -e cache/jit/0123456789abcdef0123456789abcdef.cjit && ! -e cache/jit/0123456789abcdef0123456789abcdef.lock ]] ||
      fail "an entry or lock was left" ;;
  info_non_utf8)  # row 8: nlohmann type_error.316, abort
    export CUACTOR_CACHE_DIR=$work/$'caf\xe9'
    run "$cli" info --json
    expect_rc 0
    python3 -c 'import json,sys; j=json.load(open("out")); assert "\ufffd" in j["cache_root"], j["cache_root"]' ||
      fail "output is not JSON with the bad byte replaced" ;;
  no_tmpdir_no_home)  # row 9: filesystem_error abort
    unset CUACTOR_CACHE_DIR HOME XDG_CACHE_HOME
    export TMPDIR=$work/missing
    run "$cli" info
    expect_rc 0; expect_in out "TMPDIR="
    run "$cli" jit list
    expect_failure; expect_in err "TMPDIR='$work/missing' is not an existing directory"
    run "$cli" jit warm --nvrtc /dev/null
    expect_failure; expect_in err "TMPDIR" ;;
  bench_grouped_json)  # row 10: plain text on stdout with --json
    run "$cli" bench grouped --json
    if grep -q '^\[' out; then exit 0; fi  # a GPU measured something
    expect_failure
    python3 -c 'import json; j=json.load(open("out")); assert j["error"]["message"], j' || fail "stdout is not a JSON error" ;;
  unknown_command)  # row 11: "A subcommand is required" without the word
    run "$cli" frobnicate
    expect_failure; expect_in err "'frobnicate' is not a command"; expect_in err "info, demo, bench, jit"
    run "$cli" jit frobnicate
    expect_failure; expect_in err "'frobnicate'"; expect_in err "warm" ;;
  cache_dir_after_warm)  # row 11: --cache-dir only worked before the action
    run "$cli" jit warm --help
    expect_rc 0; expect_in out "--cache-dir"
    run "$cli" jit list --cache-dir "$work/elsewhere"
    expect_rc 0; expect_in out "$work/elsewhere" ;;
  umask_000)  # row 13: directory 0777 and entries 0666
    umask 000
    printf 'extern "C" __global__ void k() {}\n' > k.cu
    run "$cli" jit warm --nvrtc k.cu --arch sm_80
    expect_rc 0
    [[ $(stat -c %a cache/jit) == 700 ]] || fail "cache directory has mode $(stat -c %a cache/jit)"
    for f in cache/jit/*.cjit; do [[ $(stat -c %a "$f") == 600 ]] || fail "$f has mode $(stat -c %a "$f")"; done ;;
  untrusted_cache_dir)  # row 13: a directory others can write is refused by name and mode
    mkdir -p cache/jit && chmod 0777 cache/jit
    run "$cli" jit list
    expect_failure; expect_in err "cache/jit' has owner uid"; expect_in err "mode 0777" ;;
  soak_bad_options)  # soak's options are checked before any device is touched (runs without a GPU)
    run "$cli" soak --faults 3
    expect_rc 2; expect_in err "only --isolated is implemented"
    run "$cli" soak --isolated --faults -1
    expect_rc 2; expect_in err "faults=-1 must be >= 0"
    run "$cli" soak --isolated --threads 0
    expect_rc 2; expect_in err "threads=0 >= 1"
    run "$cli" soak --isolated --deadline-ms 5
    expect_rc 2; expect_in err "deadline-ms=5 >= 100"
    run "$cli" soak --isolated --faults many
    expect_failure; expect_in err "faults" ;;
  warm_bad_target)  # --target is checked, and a SKU is never compiled for a GPU older than its own
    sku=conv_dgrad:sm_80:bf16,bf16,bf16,bf16,f32:nhwc,krsc,nhwc:128x128x64:1x1x1:s3:multistage:linear_combination
    run "$cli" jit --cache-dir cache warm --conv "$sku" --target banana
    expect_failure; expect_in err "--target 'banana' is not an architecture"
    run "$cli" jit --cache-dir cache warm --conv "$sku" --target sm_75
    expect_failure; expect_in err "cannot be compiled for sm_75" ;;
  bench_ep_bad_options)  # bench ep's options are checked before any device is touched (runs without a GPU)
    run "$cli" bench ep --reps 0
    expect_rc 2; expect_in err "reps=0 must be >= 1"
    run "$cli" bench ep --warmup -1
    expect_rc 2; expect_in err "warmup=-1 >= 0"
    run "$cli" bench ep --ranks -2
    expect_rc 2; expect_in err "ranks=-2 >= 0"
    run "$cli" bench ep --reps many
    expect_failure; expect_in err "reps"
    run "$cli" bench ep --interleaved=banana
    expect_failure; expect_in err "interleaved" ;;
  bench_conv_bad_options)  # bench conv's options are checked before any device is touched (runs without a GPU)
    run "$cli" bench conv --reps 0
    expect_rc 2; expect_in err "reps=0 >= 1"
    run "$cli" bench conv --op sideways
    expect_rc 2; expect_in err "op sideways: choose fprop, dgrad or wgrad"
    run "$cli" bench conv --dtype f32
    expect_rc 2; expect_in err "dtype f32: choose bf16 or f16"
    for bad in 1,2,3 32,56,56,64,64,3,0 32,56,56,64,64,3,1,1 32,56,x,64,64,3,1; do
      run "$cli" bench conv --shape "$bad"
      expect_rc 2; expect_in err "shape $bad: give 7 positive integers N,H,W,C,K,R,STRIDE"
    done
    run "$cli" bench conv --split 0x1
    expect_rc 2; expect_in err "split 0x1: give 2 positive integers IMAGESxROWS or 1x1xCHANNELS"
    run "$cli" bench conv --split 1x1x0
    expect_rc 2; expect_in err "split 1x1x0: give 3 positive integers IMAGESxROWS or 1x1xCHANNELS"
    run "$cli" bench conv --split 64x1
    expect_rc 2; expect_in err "split 64x1: each count must lie in \[1, 32\]"
    for bad in 2x1x4 1x1x17; do
      run "$cli" bench conv --split "$bad"
      expect_rc 2; expect_in err "split $bad: an fprop split is 1x1xCHANNELS with CHANNELS in \[1, 16\]"
    done
    run "$cli" bench conv --op fprop --split 2x1
    expect_rc 2; expect_in err "it splits wgrad (wgrad splits IMAGESxROWS, fprop 1x1xCHANNELS), and --op leaves wgrad out"
    run "$cli" bench conv --op wgrad --split 1x1x4
    expect_rc 2; expect_in err "it splits fprop .*and --op leaves fprop out"
    run "$cli" bench conv --sku fastest
    expect_rc 2; expect_in err "fastest" ;;
  bench_conv_plan_only)  # --plan-only plans on the host alone: its options are checked, its rows name the kernel
    run "$cli" bench conv --plan-only --arch sm_91x
    expect_rc 2; expect_in err "arch sm_91x: give a GPU architecture such as sm_90a or sm_80"
    run "$cli" bench conv --plan-only --arch ""
    expect_rc 2; expect_in err "give a GPU architecture such as sm_90a or sm_80"
    run "$cli" bench conv --plan-only --arch
    expect_failure; expect_in err "arch"
    for bad in 0 -3; do
      run "$cli" bench conv --plan-only --sm-count "$bad"
      expect_rc 2; expect_in err "sm-count $bad: give the device's multiprocessor count"
    done
    for bad in x 99999999999; do
      run "$cli" bench conv --plan-only --sm-count "$bad"
      expect_failure; expect_in err "sm-count = $bad"
    done
    run "$cli" bench conv --sm-count 114  # only with --plan-only
    expect_failure; expect_in err "plan-only"
    "$cli" kernels --cache-dir "$work/jit" >kernels.txt  # to a file: grep -q would cut a long listing's pipe
    run "$cli" bench conv --plan-only --op fprop --dtype bf16 --shape 16,56,56,96,96,3,1
    if grep -q "conv_fprop:sm_90a:bf16.*:256x96x32:1x1x1:s0:cooperative" kernels.txt; then
      expect_rc 0; expect_in out "no device touched"
      expect_in out "conv_fprop:sm_90a:bf16,bf16,bf16,bf16,f32:nhwc,krsc,nhwc:256x96x32:1x1x1:s0:cooperative"
    elif grep -q "conv_fprop:sm_90a:bf16" kernels.txt; then  # the catalog's sample: another of its kernels
      expect_rc 0; expect_in out "no device touched"; expect_in out "conv_fprop:sm_90a:bf16,bf16,bf16,bf16,f32:nhwc"
    else  # a build without the sm_90a conv catalog (the sanitizer builds) says so in the row
      expect_failure; expect_in out "no convolution kernel in this build's catalog"
    fi ;;
  tune_bad_input)  # tune's shapes, types and files are checked before anything is compiled or timed
    run "$cli" tune gemm
    expect_failure; expect_in err "nothing to tune"
    run "$cli" tune gemm --shape 16x8192
    expect_failure; expect_in err "shape '16x8192' is not MxNxK"
    run "$cli" tune gemm --shape 0x8x8
    expect_failure; expect_in err "three positive integers"
    run "$cli" tune gemm --shape 16x64x64 --dtype f32
    expect_failure; expect_in err "--dtype 'f32': tuning covers bf16, f16 and e4m3"
    run "$cli" tune gemm --shape 16x64x64 --dtype e4m3 --layout-b row
    expect_failure; expect_in err "--layout-b 'row' with --dtype e4m3: fp8 GEMMs are TN only"
    run "$cli" tune gemm --shape 16x64x64 --layout-b diag
    expect_failure; expect_in err "--layout-b 'diag' is not row or col"
    mkdir -p shapes.d
    run "$cli" tune gemm --from shapes.d
    expect_failure; expect_in err "shapes.d"
    run "$cli" tune gemm --shape 16x64x64 --reps 0
    expect_failure; expect_in err "reps=0 >= 1"
    run "$cli" tune gemm --shape 16x64x64 --warmup -1
    expect_failure; expect_in err "warmup=-1 must be >= 0"
    run "$cli" tune gemm --shape 16x64x64 --tolerance 0
    expect_failure; expect_in err "tolerance=0 must be in (0, 1)"
    run "$cli" tune gemm --shape 16x64x64 --tolerance nan
    expect_failure; expect_in err "tolerance"
    # A database directory others can write is refused before any candidate is compiled or timed.
    mkdir -p shared && chmod 0777 shared
    run "$cli" tune gemm --shape 16x64x64 --db shared/tuned.json
    expect_failure; expect_in err "tuning database directory"; expect_in err "shared' has owner uid"
    expect_in err "mode 0777"; expect_not_in out "compiled"
    run "$cli" tune grouped --shape 8x8x64x64 --db shared/tuned.json
    expect_failure; expect_in err "mode 0777"; expect_not_in out "compiled"
    mkdir -p db.d && chmod 0700 db.d
    run "$cli" tune gemm --shape 16x64x64 --db db.d
    expect_failure; expect_in err "tuning database 'db.d' is a directory, not a file"; expect_not_in out "compiled"
    if [[ $(id -u) -ne 0 ]]; then  # root writes anywhere
      mkdir -p readonly && chmod 0500 readonly
      run "$cli" tune gemm --shape 16x64x64 --db readonly/tuned.json
      chmod 0700 readonly
      expect_failure; expect_in err "cannot write the tuning database into 'readonly'"; expect_not_in out "compiled"
    fi
    run "$cli" bench gemm --rounds 0
    expect_failure; expect_in err "rounds=0 >= 1"
    for bad in 16x64 16x0x64 16x64x64x2 axbxc "" 99999999999999999999x8x8; do
      run "$cli" bench gemm --shape "$bad"
      expect_failure; expect_in err "shape '$bad' is not MxNxK (or M N K) with three positive integers"
    done
    run "$cli" bench gemm --shape 16x64x64 --dtype f32
    expect_failure; expect_in err "--dtype 'f32' is not bf16, f16 or e4m3"
    run "$cli" bench gemm --dtype f16
    expect_failure; expect_in err "--dtype requires --shape"
    run "$cli" bench gemm --swap-ab 3
    expect_failure; expect_in err "--swap-ab=3 must be 0 (the plan decides), 1 (never) or 2 (always)"
    run "$cli" bench gemm --split-k -1
    expect_failure; expect_in err "--split-k=-1 must be 0 (the plan decides), 1 (never) or a slice count"
    run "$cli" bench gemm --sku nonsense
    expect_failure; expect_in err "GemmSku 'nonsense'"
    run "$cli" bench gemm --sku ""
    expect_failure; expect_in err "GemmSku ''"
    run "$cli" bench gemm --split-k 99999999999
    expect_failure; expect_in err "Could not convert: --split-k = 99999999999"
    run "$cli" bench grouped --reps 0
    expect_failure; expect_in err "reps=0 >= 1"
    run "$cli" bench grouped --rounds 0
    expect_failure; expect_in err "rounds=0 >= 1"
    run "$cli" bench grouped --rounds x
    expect_failure; expect_in err "Could not convert: --rounds = x"
    run "$cli" bench grouped --rounds 99999999999
    expect_failure; expect_in err "Could not convert: --rounds = 99999999999" ;;
  bench_grouped_bad_shape)  # bench grouped --shape: typed errors before any device is touched, JSON with --json
    run "$cli" bench grouped --shape 32x256x4096
    expect_failure; expect_in err "shape '32x256x4096' is not GxRxNxK"
    run "$cli" bench grouped --shape 32x256x4095x7168
    expect_failure; expect_in err "N=4095 must be a multiple of 8 for bf16"
    run "$cli" bench grouped --shape 32x256x4096x7176 --dtype e4m3
    expect_failure; expect_in err "K=7176 must be a multiple of 16 for e4m3"
    run "$cli" bench grouped --shape 16384x1048576x8x8
    expect_failure; expect_in err "groups x rows per group = 17179869184 must be at most 16777216"
    run "$cli" bench grouped --shape 32x256x4096x7168 --dtype f16
    expect_failure; expect_in err "--dtype 'f16': the grouped benchmark covers bf16 and e4m3"
    run "$cli" bench grouped --shape 32x256x4096x7168 --skew 0.95
    expect_failure; expect_in err "skew=0.95 must be in \[0, 0.9\]"
    run "$cli" bench grouped --shape 32x256x4096x7168 --skew nan --json
    expect_failure; expect_in err "skew=nan"
    python3 -c 'import json; j=json.load(open("out")); assert "skew" in j["error"]["message"], j' ||
      fail "stdout is not a JSON error"
    run "$cli" bench grouped --skew 0.2
    expect_failure; expect_in err "requires --shape"
    run "$cli" bench grouped --dtype e4m3
    expect_failure; expect_in err "requires --shape"
    run "$cli" bench grouped --shape 2x8x64x64 --no-fp8
    expect_failure; expect_in err "excludes"
    run "$cli" bench grouped --shape 2x8x64x64 --skew -0 --reps 1 --rounds 1 --warmup 0
    expect_rc 0; expect_not_in out "skew -0" ;;  # accepted: no GPU, or a row measured
  tune_grouped_bad_input)  # the same for tune grouped: nothing is compiled or timed for bad input
    run "$cli" tune grouped
    expect_failure; expect_in err "nothing to tune"
    run "$cli" tune grouped --shape 128x200x1536
    expect_failure; expect_in err "shape '128x200x1536' is not GxRxNxK"
    run "$cli" tune grouped --shape 128x0x1536x2048
    expect_failure; expect_in err "rows per group=0 must be in \[1, 1048576\]"
    run "$cli" tune grouped --shape 99999999x8x8x8
    expect_failure; expect_in err "groups=99999999 must be in \[1, 16384\]"
    run "$cli" tune grouped --shape 16384x1048576x8x8
    expect_failure; expect_in err "groups x rows per group = 17179869184 must be at most 16777216"
    run "$cli" tune grouped --shape 128x200x1535x2048
    expect_failure; expect_in err "N=1535 must be a multiple of 8 for bf16"
    run "$cli" tune grouped --shape 128x200x1536x2056 --dtype e4m3
    expect_failure; expect_in err "K=2056 must be a multiple of 16 for e4m3"
    run "$cli" tune grouped --shape 8x8x64x64 --dtype f32
    expect_failure; expect_in err "--dtype 'f32': grouped tuning covers bf16, f16 and e4m3"
    run "$cli" tune grouped --shape 8x8x64x64 --skew 0.95
    expect_failure; expect_in err "skew=0.95 must be in \[0, 0.9\]"
    run "$cli" tune grouped --shape 8x8x64x64 --skew nan
    expect_failure; expect_in err "skew"
    run "$cli" tune grouped --shape 8x8x64x64 --tolerance 1
    expect_failure; expect_in err "tolerance=1 must be in (0, 1)"
    mkdir -p shapes.d
    run "$cli" tune grouped --from shapes.d
    expect_failure; expect_in err "shapes.d"
    printf '# empty list\n\n' > empty.txt
    run "$cli" tune grouped --from empty.txt
    expect_failure; expect_in err "nothing to tune" ;;
  kernels_inventory)  # `cuactor kernels` lists tuned entries; a corrupt database is ignored with a warning
    sku='dense:sm_90a:bf16,bf16,bf16,bf16,f32:row,col,row:64x128x128:1x1x1:s0:pingpong:linear_combination'
    printf '%s' '{"format":"cuactor-tuning","version":1,"entries":[{"device":{"model":"NVIDIA H100 80GB HBM3",' > db.json
    printf '%s' '"sm_count":132,"driver":13000,"arch":"sm_90a"},"class":"bf16,bf16,bf16,bf16:row,col,row:' >> db.json
    printf '%s' 'linear_combination:m<=16:n<=8192:k<=8192","sku":"'"$sku"'","max_swizzle":0,"raster_order":0,' >> db.json
    printf '%s' '"shape":"16x8192x8192","tflops":40.7,"anchor_tflops":42.7}]}' >> db.json
    run "$cli" kernels --db db.json --cache-dir "$work/jit"
    expect_rc 0; expect_in out "tuned: 1 entry"; expect_in out "$sku"; expect_in out "40.7 TFLOP/s vs cuBLAS 42.7"
    scope=${CUACTOR_EXPECT_CATALOG_SCOPE:?set by tests/tools/CMakeLists.txt}
    if [[ $scope == sample ]]; then expect_in out "(the sample: CUACTOR_CATALOG=sample)"
    elif [[ $scope == filtered ]]; then expect_in out "(filtered: CUACTOR_CATALOG_FILTER)"
    elif grep -q "(the sample\|(filtered" out; then fail "a full catalog called partial"; fi
    run "$cli" kernels --json --db db.json --cache-dir "$work/jit"
    expect_rc 0; expect_in out '"shape": "16x8192x8192"'; expect_in out '"jit_cached": \[\]'
    expect_in out "\"catalog_scope\": \"$scope\""
    printf '{"format":"cuactor-tuning","version":1,"entries":[' > bad.json
    run "$cli" kernels --db bad.json --cache-dir "$work/jit"
    expect_rc 0; expect_in out "tuned: 0 entries"; expect_in err "ignored" ;;
  warm_conv_family)  # --conv takes convolution SKUs only, --gemm no convolution ones; checked before compiling
    conv='conv_fprop:sm_90a:bf16,bf16,bf16,bf16,f32:nhwc,krsc,nhwc:128x128x64:1x1x1:s0:warpspecialized:linear_combination'
    dense='dense:sm_90a:bf16,bf16,bf16,bf16,f32:row,col,row:128x128x64:1x1x1:s0:cooperative:linear_combination'
    run "$cli" jit warm --conv "$dense" --cache-dir "$work/jit"
    expect_failure; expect_in err "family dense is not a convolution"
    run "$cli" jit warm --gemm "$conv" --cache-dir "$work/jit"
    expect_failure; expect_in err "family conv_fprop is a convolution (use --conv)"
    run "$cli" jit warm --conv "${conv/warpspecialized/spinning}" --cache-dir "$work/jit"
    expect_failure; expect_in err "schedule 'spinning' is not a known token" ;;
  *) echo "unknown case $case"; exit 2 ;;
esac
echo "ok [$case]"
