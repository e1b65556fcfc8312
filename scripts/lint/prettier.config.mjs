// Prettier's settings for the project's JavaScript (scripts/lint.sh checks them).
export default {
  printWidth: 120,
  singleQuote: true,
};
