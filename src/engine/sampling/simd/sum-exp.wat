;; The largest of float32 values and Σ e^(v - max) over them, four at a time with WebAssembly SIMD:
;; the normaliser of log-probabilities over a whole vocabulary (see ../logprobs.ts), where
;; JavaScriptCore runs a scalar JavaScript loop at two to three times the cost per entry.
;;
;; e^(v - max) = 2^y with y = (v - max)·log2(e) ≤ 0, clamped at -126 (a term below 2^-126 cannot
;; move the sum: the largest term is 1). y = k + r with k = round(y), |r| ≤ 1/2; 2^r = e^f with
;; f = r·ln2, |f| ≤ 0.347, by its Taylor series to f⁶ (error below 0.347⁷/7! < 1.3e-7); 2^k is
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
  ;; n values from address 0; the n mod 4 last ones are left to the caller.
  (func (export "sumExp") (param $n i32) (param $max f32) (result f64)
    (local $i i32) (local $end i32) (local $m v128) (local $y v128) (local $k v128) (local $f v128)
    (local $p v128) (local $low v128) (local $high v128)
    (local.set $end (i32.shl (i32.and (local.get $n) (i32.const -4)) (i32.const 2)))
    (local.set $m (f32x4.splat (local.get $max)))
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $i) (local.get $end)))
        (local.set $y
          (f32x4.pmax
            (v128.const f32x4 -126 -126 -126 -126)
            (f32x4.mul
              (f32x4.sub (v128.load (local.get $i)) (local.get $m))
              (v128.const f32x4 1.44269504 1.44269504 1.44269504 1.44269504))))
        (local.set $k (f32x4.nearest (local.get $y)))
        (local.set $f
          (f32x4.mul
            (f32x4.sub (local.get $y) (local.get $k))
            (v128.const f32x4 0.693147181 0.693147181 0.693147181 0.693147181)))
        ;; 1 + f(1 + f(1/2 + f(1/6 + f(1/24 + f(1/120 + f/720)))))
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
        ;; × 2^k: (k + 127) in the exponent field
        (local.set $p
          (f32x4.mul (local.get $p)
            (i32x4.shl
              (i32x4.add (i32x4.trunc_sat_f32x4_s (local.get $k)) (v128.const i32x4 127 127 127 127))
              (i32.const 23))))
        (local.set $low (f64x2.add (local.get $low) (f64x2.promote_low_f32x4 (local.get $p))))
        (local.set $high
          (f64x2.add (local.get $high)
            (f64x2.promote_low_f32x4 (i8x16.shuffle 8 9 10 11 12 13 14 15 0 1 2 3 4 5 6 7 (local.get $p) (local.get $p)))))
        (local.set $i (i32.add (local.get $i) (i32.const 16)))
        (br $next)))
    (local.set $low (f64x2.add (local.get $low) (local.get $high)))
    (f64.add (f64x2.extract_lane 0 (local.get $low)) (f64x2.extract_lane 1 (local.get $low))))
)
