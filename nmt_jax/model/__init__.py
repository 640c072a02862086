"""The LSTM encoder-decoder: research code.

lstm (layers with a hand-written backward pass), encoder, decoder_cell,
hoisting (the decoder's kernel gradients after its loop), precision and
seq2seq (`Seq2Seq`: the encoder, the decoder step, the attention kind).
"""
