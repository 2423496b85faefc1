;; The largest of float32 values, Σ e^(v - max) over them and their k largest, four at a time with
;; WebAssembly SIMD: the normaliser and alternatives of log-probabilities over a whole vocabulary
;; (see ../logprobs.ts), where JavaScriptCore runs scalar JavaScript loops at two to three times
;; the cost per entry.
;;
;; e^(v - max) = 2^y with y = (v - max)·log2(e) ≤ 0, clamped at -126 (a term below 2^-126 cannot
;; move the sum: the largest term is 1). y = r + g with r = round(y), |g| ≤ 1/2; 2^g = e^f with
;; f = g·ln2, |f| ≤ 0.347, by its Taylor series to f⁶ (error below 0.347⁷/7! < 1.3e-7); 2^r is
;; built in the exponent bits. In float32 arithmetic (as vLLM's log_softmax), the rounding of
;; v - max and of y grows with the gap d = max - v: each term is within (1 + d)·2e-7 of
;; e^(v - max), relative (measured 1.6e-7 at most). The sum is then within 2e-7·(1 + H) relative,
;; H the distribution's entropy (≤ ln of the vocabulary size: 2.6e-6 at 151,936 tokens). The terms
;; are accumulated in float64 (two lanes each for the low and high halves).
;;
;; Assembled by `make wasm` (src/engine/sampling/simd/assemble.ts) into sum-exp.wasm.ts; a test
;; checks that the two agree.
(module
  (memory (export "memory") 1)
  ;; The largest of n values from address 0 (-inf when n < 4); the n mod 4 last ones are left to
  ;; the caller. NaN values are skipped (pmax keeps its first operand unless the second is larger).
  (func (export "max") (param $n i32) (result f32)
    (local $i i32) (local $end i32) (local $m v128)
    (local.set $end (i32.shl (i32.and (local.get $n) (i32.const -4)) (i32.const 2)))
    (local.set $m (v128.const f32x4 -inf -inf -inf -inf))
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $i) (local.get $end)))
        (local.set $m (f32x4.pmax (local.get $m) (v128.load (local.get $i))))
        (local.set $i (i32.add (local.get $i) (i32.const 16)))
        (br $next)))
    (f32.max
      (f32.max (f32x4.extract_lane 0 (local.get $m)) (f32x4.extract_lane 1 (local.get $m)))
      (f32.max (f32x4.extract_lane 2 (local.get $m)) (f32x4.extract_lane 3 (local.get $m)))))
  ;; Σ e^(v - max) over n values from address 0; the n mod 4 last ones are left to the caller.
  (func (export "sumExp") (param $n i32) (param $max f32) (result f64)
    (local $i i32) (local $end i32) (local $m v128) (local $v v128) (local $y v128) (local $r v128)
    (local $f v128) (local $p v128) (local $low v128) (local $high v128)
    (local.set $end (i32.shl (i32.and (local.get $n) (i32.const -4)) (i32.const 2)))
    (local.set $m (f32x4.splat (local.get $max)))
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $i) (local.get $end)))
        (local.set $v (v128.load (local.get $i)))
        (local.set $y
          (f32x4.pmax
            (v128.const f32x4 -126 -126 -126 -126)
            (f32x4.mul (f32x4.sub (local.get $v) (local.get $m)) (v128.const f32x4 1.44269504 1.44269504 1.44269504 1.44269504))))
        (local.set $r (f32x4.nearest (local.get $y)))
        (local.set $f
          (f32x4.mul (f32x4.sub (local.get $y) (local.get $r)) (v128.const f32x4 0.693147181 0.693147181 0.693147181 0.693147181)))
        (local.set $p
          (f32x4.add (v128.const f32x4 0.166666667 0.166666667 0.166666667 0.166666667)
            (f32x4.mul (local.get $f)
              (f32x4.add (v128.const f32x4 0.0416666667 0.0416666667 0.0416666667 0.0416666667)
                (f32x4.mul (local.get $f)
                  (f32x4.add (v128.const f32x4 0.00833333333 0.00833333333 0.00833333333 0.00833333333)
                    (f32x4.mul (local.get $f) (v128.const f32x4 0.00138888889 0.00138888889 0.00138888889 0.00138888889))))))))
        (local.set $p
          (f32x4.add (v128.const f32x4 1 1 1 1)
            (f32x4.mul (local.get $f)
              (f32x4.add (v128.const f32x4 1 1 1 1)
                (f32x4.mul (local.get $f)
                  (f32x4.add (v128.const f32x4 0.5 0.5 0.5 0.5) (f32x4.mul (local.get $f) (local.get $p))))))))
        (local.set $p
          (f32x4.mul (local.get $p)
            (i32x4.shl
              (i32x4.add (i32x4.trunc_sat_f32x4_s (local.get $r)) (v128.const i32x4 127 127 127 127))
              (i32.const 23))))
        (local.set $low (f64x2.add (local.get $low) (f64x2.promote_low_f32x4 (local.get $p))))
        (local.set $high
          (f64x2.add (local.get $high)
            (f64x2.promote_low_f32x4 (i8x16.shuffle 8 9 10 11 12 13 14 15 0 1 2 3 4 5 6 7 (local.get $p) (local.get $p)))))
        (local.set $i (i32.add (local.get $i) (i32.const 16)))
        (br $next)))
    (local.set $low (f64x2.add (local.get $low) (local.get $high)))
    (f64.add (f64x2.extract_lane 0 (local.get $low)) (f64x2.extract_lane 1 (local.get $low))))
  ;; The k largest of n values from address 0 (the n mod 4 last ones are left to the caller),
  ;; best first, the earlier index first among equals (log-probabilities' alternatives): float32
  ;; values at $top and their indices (i32) at $top + 4k. Only values above the k-th so far are
  ;; looked at one by one (a vector comparison tells when one of four is). NaN and -inf values are
  ;; never taken; unfilled places keep -inf and index -1. A pass of its own: inside the sum's loop
  ;; the rarely taken branch made JavaScriptCore's code for the sum slower than the two passes.
  (func (export "top") (param $n i32) (param $k i32) (param $top i32)
    (local $i i32) (local $end i32) (local $v v128)
    (local $ids i32) (local $floor f32) (local $floors v128) (local $lane i32) (local $x f32) (local $j i32)
    (local.set $ids (i32.add (local.get $top) (i32.shl (local.get $k) (i32.const 2))))
    (block $filled
      (loop $fill
        (br_if $filled (i32.ge_u (local.get $j) (local.get $k)))
        (f32.store (i32.add (local.get $top) (i32.shl (local.get $j) (i32.const 2))) (f32.const -inf))
        (i32.store (i32.add (local.get $ids) (i32.shl (local.get $j) (i32.const 2))) (i32.const -1))
        (local.set $j (i32.add (local.get $j) (i32.const 1)))
        (br $fill)))
    (if (i32.eqz (local.get $k)) (then (return)))
    (local.set $floor (f32.const -inf))
    (local.set $floors (f32x4.splat (local.get $floor)))
    (local.set $end (i32.shl (i32.and (local.get $n) (i32.const -4)) (i32.const 2)))
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $i) (local.get $end)))
        (local.set $v (v128.load (local.get $i)))
        (if (v128.any_true (f32x4.gt (local.get $v) (local.get $floors)))
          (then
            (local.set $lane (i32.const 0))
            (block $lanes
              (loop $each
                (br_if $lanes (i32.ge_u (local.get $lane) (i32.const 4)))
                (local.set $x (f32.load (i32.add (local.get $i) (i32.shl (local.get $lane) (i32.const 2)))))
                (if (f32.gt (local.get $x) (local.get $floor))
                  (then
                    ;; Insertion into the sorted places: move the smaller ones down by one.
                    (local.set $j (i32.sub (local.get $k) (i32.const 1)))
                    (block $placed
                      (loop $shift
                        (br_if $placed (i32.eqz (local.get $j)))
                        (br_if $placed
                          (i32.eqz (f32.lt
                            (f32.load (i32.add (local.get $top) (i32.shl (i32.sub (local.get $j) (i32.const 1)) (i32.const 2))))
                            (local.get $x))))
                        (f32.store (i32.add (local.get $top) (i32.shl (local.get $j) (i32.const 2)))
                          (f32.load (i32.add (local.get $top) (i32.shl (i32.sub (local.get $j) (i32.const 1)) (i32.const 2)))))
                        (i32.store (i32.add (local.get $ids) (i32.shl (local.get $j) (i32.const 2)))
                          (i32.load (i32.add (local.get $ids) (i32.shl (i32.sub (local.get $j) (i32.const 1)) (i32.const 2)))))
                        (local.set $j (i32.sub (local.get $j) (i32.const 1)))
                        (br $shift)))
                    (f32.store (i32.add (local.get $top) (i32.shl (local.get $j) (i32.const 2))) (local.get $x))
                    (i32.store (i32.add (local.get $ids) (i32.shl (local.get $j) (i32.const 2)))
                      (i32.add (i32.shr_u (local.get $i) (i32.const 2)) (local.get $lane)))
                    (local.set $floor (f32.load (i32.add (local.get $top) (i32.shl (i32.sub (local.get $k) (i32.const 1)) (i32.const 2)))))
                    (local.set $floors (f32x4.splat (local.get $floor)))))
                (local.set $lane (i32.add (local.get $lane) (i32.const 1)))
                (br $each)))))
        (local.set $i (i32.add (local.get $i) (i32.const 16)))
        (br $next))))
)
