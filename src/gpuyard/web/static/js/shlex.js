// Split a command line as a POSIX shell would split words (quotes and backslashes), without
// expanding anything: the job gets exactly these arguments (the API takes argv, never a shell
// line). `sh -c '...'` is the way to ask for a shell.

export class SplitError extends Error {}

export function shellSplit(line) {
  const words = [];
  let word = "";
  let inWord = false;
  let i = 0;
  while (i < line.length) {
    const c = line[i];
    if (c === "'") {
      const end = line.indexOf("'", i + 1);
      if (end < 0) throw new SplitError("a single quote (') is not closed");
      word += line.slice(i + 1, end);
      inWord = true;
      i = end + 1;
    } else if (c === '"') {
      i += 1;
      let closed = false;
      while (i < line.length) {
        const d = line[i];
        if (d === '"') { closed = true; i += 1; break; }
        if (d === "\\" && i + 1 < line.length && '"\\$`\n'.includes(line[i + 1])) {
          if (line[i + 1] !== "\n") word += line[i + 1];
          i += 2;
          continue;
        }
        word += d;
        i += 1;
      }
      if (!closed) throw new SplitError('a double quote (") is not closed');
      inWord = true;
    } else if (c === "\\") {
      if (i + 1 >= line.length) throw new SplitError("a backslash ends the line");
      if (line[i + 1] !== "\n") { word += line[i + 1]; inWord = true; }
      i += 2;
    } else if (/\s/.test(c)) {
      if (inWord) words.push(word);
      word = "";
      inWord = false;
      i += 1;
    } else {
      word += c;
      inWord = true;
      i += 1;
    }
  }
  if (inWord) words.push(word);
  return words;
}

/** Shell-like operators that a plain argv would pass to the program as words, not act on. */
export function shellOperators(words) {
  return words.filter((w) => ["|", "||", "&&", ";", ">", ">>", "<", "&", "2>&1"].includes(w));
}
