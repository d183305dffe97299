// capture-worklet.js - runs on the audio thread: collects the microphone's
// samples (first channel) into 20 ms blocks and posts them, with their RMS
// level, to the page. No processing beyond that.
class Capture extends AudioWorkletProcessor {
  constructor() {
    super();
    this.block = Math.round(sampleRate / 50); // 20 ms
    this.buf = new Float32Array(this.block);
    this.n = 0;
  }
  process(inputs) {
    const ch = inputs[0] && inputs[0][0];
    if (!ch) return true;
    for (let i = 0; i < ch.length; i++) {
      this.buf[this.n++] = ch[i];
      if (this.n === this.block) {
        let e = 0;
        for (let k = 0; k < this.block; k++) e += this.buf[k] * this.buf[k];
        this.port.postMessage({ samples: this.buf, rms: Math.sqrt(e / this.block) }, [this.buf.buffer]);
        this.buf = new Float32Array(this.block);
        this.n = 0;
      }
    }
    return true;
  }
}
registerProcessor('sotto-capture', Capture);
