// Canvas helpers shared by every picture on the page (heatmap, histogram, the Experts charts):
// one rule for high-DPI screens, RGBA pixels from Python as a drawable bitmap, the colour bar,
// and the lattice size every heatmap asks the worker for.

// Cells per side of a heatmap lattice asked of the worker (tensorloupe.web.views caps it).
export const LATTICE = 256;

// Give `canvas` a backing store of devicePixelRatio device pixels per CSS pixel (crisp on
// high-DPI screens) for a `width` x `height` CSS-pixel picture, and return its 2-D context,
// drawing in CSS pixels, without smoothing (lattice cells stay sharp). The canvas's CSS size
// is set too, unless the stylesheet sizes it (`styled`: the histogram fills its box's width).
export function hidpi(canvas, width, height, {styled = false} = {}) {
  const ratio = window.devicePixelRatio || 1;
  if (!styled) {
    canvas.style.width = `${width}px`;
    canvas.style.height = `${height}px`;
  }
  canvas.width = Math.round(width * ratio);
  canvas.height = Math.round(height * ratio);
  const ctx = canvas.getContext("2d");
  ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
  ctx.imageSmoothingEnabled = false;
  return ctx;
}

// A canvas holding RGBA `pixels` (rows x cols, from tensorloupe.colormap), to be drawn scaled
// with drawImage.
export function bitmap(pixels, rows, cols) {
  const image = document.createElement("canvas");
  image.width = cols;
  image.height = rows;
  image.getContext("2d").putImageData(
    new ImageData(new Uint8ClampedArray(pixels.buffer, pixels.byteOffset, rows * cols * 4), cols, rows), 0, 0);
  return image;
}

// The palette as a horizontal bar, one canvas pixel per level (CSS stretches it): `palette` is
// RGBA bytes whose first `levels` entries are the gradient.
export function drawColorbar(canvas, palette, levels) {
  canvas.width = levels;
  canvas.height = 1;
  const ctx = canvas.getContext("2d");
  const image = ctx.createImageData(levels, 1);
  image.data.set(palette.subarray(0, levels * 4));
  ctx.putImageData(image, 0, 0);
}
