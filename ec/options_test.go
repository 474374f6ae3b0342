package ec

// namedOptions is one point of the option matrix.
type namedOptions struct {
	name    string
	options []Option
}

// optionMatrix lists the option sets every codec test runs under: each SIMD
// level, alone and with concurrency (reedsolomon's testOptions in spirit).
func optionMatrix() []namedOptions {
	var matrix []namedOptions
	for _, level := range SIMDLevels {
		matrix = append(matrix,
			namedOptions{"simd=" + level.String(), []Option{WithSIMD(level)}},
			namedOptions{"simd=" + level.String() + "/concurrency=4",
				[]Option{WithSIMD(level), WithConcurrency(4)}},
		)
	}
	return matrix
}
