;; The largest of float32 values, Σ e^(v - max) over them and their k largest, four at a time with
;; WebAssembly SIMD: the normaliser and alternatives of log-probabilities over a whole vocabulary
;; (see ../logprobs.ts), where JavaScriptCore runs scalar JavaScript loops at two to three times
;; the cost per entry; and the temperature sampler's split of a row (see ../row-split.ts).
;;
;; e^(v - max) = 2^y with y = (v - max)·log2(e) ≤ 0, clamped at -126 (a term below 2^-126 cannot
;; move the sum: the largest term is 1). y = r + g with r = round(y) (adding 1.5·2^23 leaves it in
;; the low bits) and |g| ≤ 1/2; 2^g by its Taylor series to g⁷ (error below 5e-9), evaluated by
;; Estrin's scheme (a shorter chain of dependent operations than Horner's: about a tenth faster
;; here); 2^r is built in the exponent bits. In float32 arithmetic (as vLLM's log_softmax), the rounding of
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
    (local $g v128) (local $g2 v128) (local $p v128) (local $low v128) (local $high v128)
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
        ;; round(y) by 1.5·2^23, 2^g by Estrin's scheme (see the top of this file). The same lines
        ;; are in split below: as a function of its own, JavaScriptCore did not inline the call,
        ;; and both loops ran slower.
        (local.set $r (f32x4.add (local.get $y) (v128.const f32x4 12582912 12582912 12582912 12582912)))
        (local.set $g (f32x4.sub (local.get $y) (f32x4.sub (local.get $r) (v128.const f32x4 12582912 12582912 12582912 12582912))))
        (local.set $g2 (f32x4.mul (local.get $g) (local.get $g)))
        (local.set $p
          (f32x4.mul
            (f32x4.add
              (f32x4.add (f32x4.add (v128.const f32x4 1 1 1 1) (f32x4.mul (local.get $g) (v128.const f32x4 0.6931471806 0.6931471806 0.6931471806 0.6931471806))) (f32x4.mul (local.get $g2) (f32x4.add (v128.const f32x4 0.240226507 0.240226507 0.240226507 0.240226507) (f32x4.mul (local.get $g) (v128.const f32x4 0.05550410866 0.05550410866 0.05550410866 0.05550410866)))))
              (f32x4.mul (f32x4.mul (local.get $g2) (local.get $g2))
                (f32x4.add (f32x4.add (v128.const f32x4 0.009618129108 0.009618129108 0.009618129108 0.009618129108) (f32x4.mul (local.get $g) (v128.const f32x4 0.001333355815 0.001333355815 0.001333355815 0.001333355815))) (f32x4.mul (local.get $g2) (f32x4.add (v128.const f32x4 0.0001540353039 0.0001540353039 0.0001540353039 0.0001540353039) (f32x4.mul (local.get $g) (v128.const f32x4 1.52527338e-05 1.52527338e-05 1.52527338e-05 1.52527338e-05)))))))
            (i32x4.shl (i32x4.add (local.get $r) (v128.const i32x4 127 127 127 127)) (i32.const 23))))
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
  ;; The temperature sampler's split of n values from address 0 (see ../row-split.ts), the n mod 4
  ;; last ones left to the caller, with d = (max - v)·scale in float32 (RowSplit classifies with
  ;; the same float32 operations, so both put every value on the same side):
  ;; - the indices of the head, d < $head, are written as i32 from $list on, in index order, and
  ;;   their count returned;
  ;; - those of the tail (the rest with d ≤ $limit) with d < $listEnd, from $nearList on, their
  ;;   count stored as i32 at $out + 8;
  ;; - Σ e^(-d/32) over the tail is stored as f64 at $out.
  ;; $table holds 16 swizzles of 16 bytes, one for each 4-bit lane mask (see sum-exp.ts). NaN and
  ;; -inf values are in neither list nor the sum. e^(-d/32) = 2^y with y = d·$yPerD, as in sumExp.
  ;; The float32 rounding of d and y grows with d: each term is within (1 + d/32)·3e-7 of
  ;; e^(-d/32) computed from the float64 d, relative (measured: 1.6e-7). Float32 throughout runs
  ;; in about 0.6 of the time of the same pass with d in float64.
  (func (export "split") (param $n i32) (param $max f32) (param $scale f32) (param $head f32) (param $limit f32) (param $listEnd f32)
      (param $yPerD f32) (param $table i32) (param $list i32) (param $nearList i32) (param $out i32) (result i32)
    (local $i i32) (local $end i32) (local $count i32) (local $mask i32) (local $ids v128)
    (local $d v128) (local $inHead v128) (local $inTail v128) (local $e v128) (local $nearCount i32) (local $y v128) (local $r v128) (local $g v128) (local $g2 v128)
    (local $p v128) (local $low v128) (local $high v128) (local $m v128) (local $s v128) (local $h v128) (local $l v128) (local $c v128)
    (local.set $end (i32.shl (i32.and (local.get $n) (i32.const -4)) (i32.const 2)))
    (local.set $m (f32x4.splat (local.get $max)))
    (local.set $s (f32x4.splat (local.get $scale)))
    (local.set $h (f32x4.splat (local.get $head)))
    (local.set $l (f32x4.splat (local.get $limit)))
    (local.set $e (f32x4.splat (local.get $listEnd)))
    (local.set $c (f32x4.splat (local.get $yPerD)))
    (local.set $ids (v128.const i32x4 0 1 2 3))
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $i) (local.get $end)))
        (local.set $d (f32x4.mul (f32x4.sub (local.get $m) (v128.load (local.get $i))) (local.get $s)))
        (local.set $inHead (f32x4.lt (local.get $d) (local.get $h)))
        ;; The lists, compacted without a branch: the swizzle for a lane mask moves the chosen
        ;; lanes' indices to the front, and the store's other lanes are overwritten by the next
        ;; one (each list has room for 4 more).
        (local.set $mask (i32x4.bitmask (local.get $inHead)))
        (v128.store (i32.add (local.get $list) (i32.shl (local.get $count) (i32.const 2)))
          (i8x16.swizzle (local.get $ids) (v128.load (i32.add (local.get $table) (i32.shl (local.get $mask) (i32.const 4))))))
        (local.set $count (i32.add (local.get $count) (i32.popcnt (local.get $mask))))
        (local.set $inTail (v128.andnot (f32x4.le (local.get $d) (local.get $l)) (local.get $inHead)))
        (local.set $mask (i32x4.bitmask (v128.and (local.get $inTail) (f32x4.lt (local.get $d) (local.get $e)))))
        (v128.store (i32.add (local.get $nearList) (i32.shl (local.get $nearCount) (i32.const 2)))
          (i8x16.swizzle (local.get $ids) (v128.load (i32.add (local.get $table) (i32.shl (local.get $mask) (i32.const 4))))))
        (local.set $nearCount (i32.add (local.get $nearCount) (i32.popcnt (local.get $mask))))
        (local.set $ids (i32x4.add (local.get $ids) (v128.const i32x4 4 4 4 4)))
        ;; Lanes outside the tail compute garbage here (infinities, NaN), masked away below.
        (local.set $y (f32x4.mul (local.get $d) (local.get $c)))
        (local.set $r (f32x4.add (local.get $y) (v128.const f32x4 12582912 12582912 12582912 12582912)))
        (local.set $g (f32x4.sub (local.get $y) (f32x4.sub (local.get $r) (v128.const f32x4 12582912 12582912 12582912 12582912))))
        (local.set $g2 (f32x4.mul (local.get $g) (local.get $g)))
        (local.set $p
          (f32x4.add
            (f32x4.add (f32x4.add (v128.const f32x4 1 1 1 1) (f32x4.mul (local.get $g) (v128.const f32x4 0.6931471806 0.6931471806 0.6931471806 0.6931471806))) (f32x4.mul (local.get $g2) (f32x4.add (v128.const f32x4 0.240226507 0.240226507 0.240226507 0.240226507) (f32x4.mul (local.get $g) (v128.const f32x4 0.05550410866 0.05550410866 0.05550410866 0.05550410866)))))
            (f32x4.mul (f32x4.mul (local.get $g2) (local.get $g2))
              (f32x4.add (f32x4.add (v128.const f32x4 0.009618129108 0.009618129108 0.009618129108 0.009618129108) (f32x4.mul (local.get $g) (v128.const f32x4 0.001333355815 0.001333355815 0.001333355815 0.001333355815))) (f32x4.mul (local.get $g2) (f32x4.add (v128.const f32x4 0.0001540353039 0.0001540353039 0.0001540353039 0.0001540353039) (f32x4.mul (local.get $g) (v128.const f32x4 1.52527338e-05 1.52527338e-05 1.52527338e-05 1.52527338e-05))))))))
        (local.set $p
          (v128.and
            (local.get $inTail)
            (f32x4.mul (local.get $p) (i32x4.shl (i32x4.add (local.get $r) (v128.const i32x4 127 127 127 127)) (i32.const 23)))))
        (local.set $low (f64x2.add (local.get $low) (f64x2.promote_low_f32x4 (local.get $p))))
        (local.set $high
          (f64x2.add (local.get $high)
            (f64x2.promote_low_f32x4 (i8x16.shuffle 8 9 10 11 12 13 14 15 0 1 2 3 4 5 6 7 (local.get $p) (local.get $p)))))
        (local.set $i (i32.add (local.get $i) (i32.const 16)))
        (br $next)))
    (local.set $low (f64x2.add (local.get $low) (local.get $high)))
    (f64.store (local.get $out) (f64.add (f64x2.extract_lane 0 (local.get $low)) (f64x2.extract_lane 1 (local.get $low))))
    (i32.store (i32.add (local.get $out) (i32.const 8)) (local.get $nearCount))
    (local.get $count))
)
